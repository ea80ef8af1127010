package worker

import (
	"encoding/binary"
	"fmt"
	"net"
	"time"
)

// ArenaFD is the socket on which a worker asks the server to hold its arena's bytes against the
// server's total (gpuserverd/server/arenas.go). Without it (a worker run alone, in tests) only
// the per-session limit applies.
const ArenaFD = 6

// The arena-budget messages, one per seqpacket: a request is the bytes the session wants to hold
// (u64, little-endian; 0 gives its arena back), a reply whether they fit (u8 0 or 1) and how
// many this session could hold now (u64).
const (
	arenaRequestLen = 8
	arenaReplyLen   = 9
)

// DecodeArenaRequest parses a request; anything but 8 bytes is malformed.
func DecodeArenaRequest(b []byte) (uint64, error) {
	if len(b) != arenaRequestLen {
		return 0, fmt.Errorf("arena request: %d bytes, want %d", len(b), arenaRequestLen)
	}
	return binary.LittleEndian.Uint64(b), nil
}

// EncodeArenaReply is the server's answer.
func EncodeArenaReply(ok bool, avail uint64) []byte {
	b := make([]byte, arenaReplyLen)
	if ok {
		b[0] = 1
	}
	binary.LittleEndian.PutUint64(b[1:], avail)
	return b
}

func decodeArenaReply(b []byte) (ok bool, avail uint64, err error) {
	if len(b) != arenaReplyLen || b[0] > 1 {
		return false, 0, fmt.Errorf("arena reply: malformed (%d bytes)", len(b))
	}
	return b[0] == 1, binary.LittleEndian.Uint64(b[1:]), nil
}

// arenaBudget asks the server to hold n bytes for this session's arena.
type arenaBudget func(n uint64) (ok bool, avail uint64, err error)

// budgetTimeout bounds a request: the server answers from memory at once.
const budgetTimeout = 5 * time.Second

func socketBudget(c *net.UnixConn) arenaBudget {
	return func(n uint64) (bool, uint64, error) {
		c.SetDeadline(time.Now().Add(budgetTimeout))
		req := make([]byte, arenaRequestLen)
		binary.LittleEndian.PutUint64(req, n)
		if _, err := c.Write(req); err != nil {
			return false, 0, fmt.Errorf("asking the server for arena room: %w", err)
		}
		buf := make([]byte, 64)
		k, err := c.Read(buf)
		if err != nil {
			return false, 0, fmt.Errorf("asking the server for arena room: %w", err)
		}
		return decodeArenaReply(buf[:k])
	}
}

// openArenaSocket opens the budget socket inherited at ArenaFD, if the server passed one.
func openArenaSocket() *net.UnixConn { return inheritedUnixConn(ArenaFD, "arenas") }

// SetArenaBudget makes ShmOpen ask budget before creating an arena.
func (s *Session) SetArenaBudget(budget arenaBudget) { s.budget = budget }
