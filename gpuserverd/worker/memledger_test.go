package worker

import (
	"bytes"
	"testing"
)

// FuzzMemoryMessages: the instance memory ledger's messages decode only when well formed, and
// what decodes encodes back to the same bytes.
func FuzzMemoryMessages(f *testing.F) {
	f.Add(EncodeMemoryRequest(0, 4<<20))
	f.Add(EncodeMemoryRequest(3, -1))
	f.Add(EncodeMemoryReply(true, 8<<20))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		if dev, delta, err := DecodeMemoryRequest(b); err == nil && !bytes.Equal(EncodeMemoryRequest(dev, delta), b) {
			t.Fatalf("request %x decoded to %d %d", b, dev, delta)
		}
		if ok, used, err := DecodeMemoryReply(b); err == nil && !bytes.Equal(EncodeMemoryReply(ok, used), b) {
			t.Fatalf("reply %x decoded to %v %d", b, ok, used)
		}
	})
}
