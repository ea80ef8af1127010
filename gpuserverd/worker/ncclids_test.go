package worker

import (
	"bytes"
	"testing"
)

func FuzzDecodeNcclIDRequest(f *testing.F) {
	f.Add(EncodeNcclIDRequest(NcclIDRegister, [16]byte{1}, []byte("backend id")))
	f.Add(EncodeNcclIDRequest(NcclIDLookup, [16]byte{2}, nil))
	f.Add([]byte{'X', 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		op, id, bid, err := DecodeNcclIDRequest(b)
		if err != nil {
			return
		}
		if op == NcclIDLookup && len(bid) != 0 || op == NcclIDRegister && (len(bid) == 0 || len(bid) > MaxNcclBackendID) {
			t.Fatalf("accepted op %c with %d bytes of backend id", op, len(bid))
		}
		if again := EncodeNcclIDRequest(op, id, bid); !bytes.Equal(again, b) {
			t.Fatalf("round trip: %x != %x", again, b)
		}
	})
}

func TestDecodeNcclIDRequestRefusals(t *testing.T) {
	for _, b := range [][]byte{
		nil, {'L'}, EncodeNcclIDRequest(NcclIDLookup, [16]byte{}, []byte{1}),
		EncodeNcclIDRequest(NcclIDRegister, [16]byte{}, nil),
		EncodeNcclIDRequest(NcclIDRegister, [16]byte{}, make([]byte, MaxNcclBackendID+1)),
		EncodeNcclIDRequest('Q', [16]byte{}, nil),
	} {
		if _, _, _, err := DecodeNcclIDRequest(b); err == nil {
			t.Errorf("accepted %x", b)
		}
	}
}
