package worker

import (
	"bytes"
	"testing"
)

// FuzzIpcRequest: the registry's request decoder never panics, accepts only well-formed
// requests, and what it accepts encodes back to the same bytes.
func FuzzIpcRequest(f *testing.F) {
	f.Add(EncodeIpcRequest(IpcRequest{Op: IpcExport, Kind: 1, Bytes: 4096, Blob: []byte("handle")}))
	f.Add(EncodeIpcRequest(IpcRequest{Op: IpcOpen, Kind: 3, Key: [IpcKeyLen]byte{1, 2, 3}}))
	f.Add([]byte{'U', 9})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeIpcRequest(b)
		if err != nil {
			return
		}
		if r.Op != IpcExport && (len(r.Blob) != 0 || r.Bytes != 0) || len(r.Blob) > MaxIpcBlob {
			t.Fatalf("accepted %+v", r)
		}
		if !bytes.Equal(EncodeIpcRequest(r), b) {
			t.Fatalf("%x decodes to %+v, which encodes otherwise", b, r)
		}
	})
}

// FuzzIpcReply: the worker's decoder of the server's replies never panics and bounds the blob.
func FuzzIpcReply(f *testing.F) {
	f.Add(EncodeIpcReply(IpcOK, 2, [IpcKeyLen]byte{7}, []byte("blob")))
	f.Add([]byte{3})
	f.Fuzz(func(t *testing.T, b []byte) {
		status, _, _, blob, err := DecodeIpcReply(b)
		if err == nil && (status > IpcRefused || len(blob) > MaxIpcBlob) {
			t.Fatalf("accepted status %d, %d-byte blob", status, len(blob))
		}
	})
}
