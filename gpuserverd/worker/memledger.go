package worker

import (
	"encoding/binary"
	"fmt"
	"net"
	"time"
)

// MemoryFD is the socket on which a shared-tier worker reserves device memory against its
// instance's quota (gpuserverd/server/memledger.go). A token's memory quota is per instance per
// GPU, and an instance may have several sessions (its VM's processes), each a worker process: so
// the server keeps the books, each worker reserves before allocating and gives back after
// freeing, and a worker that dies (SIGKILL included) has its share dropped by the server. Without
// the socket (a worker run alone, in tests) the quota is the session's own.
const MemoryFD = 7

// The ledger's messages, one per seqpacket: a request is the session's device index (u32) and a
// signed change in bytes (i64; 0 asks only); a reply whether it fitted (u8 0 or 1) and what the
// instance then holds on that GPU (u64). Little-endian.
const (
	memRequestLen = 12
	memReplyLen   = 9
)

// EncodeMemoryRequest is a worker's request.
func EncodeMemoryRequest(device uint32, delta int64) []byte {
	b := make([]byte, memRequestLen)
	binary.LittleEndian.PutUint32(b, device)
	binary.LittleEndian.PutUint64(b[4:], uint64(delta))
	return b
}

// DecodeMemoryRequest parses a request; anything but 12 bytes is malformed.
func DecodeMemoryRequest(b []byte) (device uint32, delta int64, err error) {
	if len(b) != memRequestLen {
		return 0, 0, fmt.Errorf("memory request: %d bytes, want %d", len(b), memRequestLen)
	}
	return binary.LittleEndian.Uint32(b), int64(binary.LittleEndian.Uint64(b[4:])), nil
}

// EncodeMemoryReply is the server's answer.
func EncodeMemoryReply(ok bool, used uint64) []byte {
	b := make([]byte, memReplyLen)
	if ok {
		b[0] = 1
	}
	binary.LittleEndian.PutUint64(b[1:], used)
	return b
}

// DecodeMemoryReply parses the server's answer.
func DecodeMemoryReply(b []byte) (ok bool, used uint64, err error) {
	if len(b) != memReplyLen || b[0] > 1 {
		return false, 0, fmt.Errorf("memory reply: malformed (%d bytes)", len(b))
	}
	return b[0] == 1, binary.LittleEndian.Uint64(b[1:]), nil
}

// memoryLedger reserves (delta > 0), gives back (delta < 0) or asks (0) the instance's bytes on
// the session's device index; used is the instance's total there afterwards.
type memoryLedger func(device int, delta int64) (ok bool, used uint64, err error)

func socketLedger(c *net.UnixConn) memoryLedger {
	buf := make([]byte, 64)
	return func(device int, delta int64) (bool, uint64, error) {
		c.SetDeadline(time.Now().Add(budgetTimeout))
		if _, err := c.Write(EncodeMemoryRequest(uint32(device), delta)); err != nil {
			return false, 0, fmt.Errorf("instance memory ledger: %w", err)
		}
		k, err := c.Read(buf)
		if err != nil {
			return false, 0, fmt.Errorf("instance memory ledger: %w", err)
		}
		return DecodeMemoryReply(buf[:k])
	}
}

// openMemorySocket opens the ledger socket inherited at MemoryFD, if the server passed one.
func openMemorySocket() *net.UnixConn { return inheritedUnixConn(MemoryFD, "memory") }

// SetMemoryLedger makes the quota the instance's, counted by ledger across its sessions.
func (s *Session) SetMemoryLedger(ledger memoryLedger) { s.ledger = ledger }
