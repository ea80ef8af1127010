package worker

import (
	"errors"
	"fmt"
	"net"
	"time"
)

// NcclFD is the socket on which a worker keeps its NCCL unique ids in the server's registry of
// the instance's ids (gpuserverd/server/ncclids.go): an instance's sessions are separate workers,
// and the ranks of one communicator (one process per GPU, as torchrun starts them) must find the
// backend's id behind the unique id any one of them issued. The server files each id under the
// worker's instance and answers a lookup only from a worker of the same instance. Without the
// socket (a worker run alone, or adopted by a later gpuserverd) ids are the session's own.
const NcclFD = 8

// The registry's messages, one per seqpacket: a request is an op byte ('R' register, 'L' look
// up), the 16-byte id and, to register, the backend's id (1 to MaxNcclBackendID bytes); a reply a
// status byte (NcclIDOK, NcclIDUnknown, NcclIDRefused) and, for a lookup, the backend's id.
const (
	NcclIDRegister = 'R'
	NcclIDLookup   = 'L'

	NcclIDOK      = 0
	NcclIDUnknown = 1 // not issued to this instance
	NcclIDRefused = 2 // malformed, already registered, or the instance holds too many

	MaxNcclBackendID = 256
)

// EncodeNcclIDRequest is a worker's request; backendID only with NcclIDRegister.
func EncodeNcclIDRequest(op byte, id [16]byte, backendID []byte) []byte {
	return append(append([]byte{op}, id[:]...), backendID...)
}

// DecodeNcclIDRequest parses a request; it names what is wrong with a malformed one.
func DecodeNcclIDRequest(b []byte) (op byte, id [16]byte, backendID []byte, err error) {
	if len(b) < 17 {
		return 0, id, nil, fmt.Errorf("nccl id request: %d bytes, want at least 17", len(b))
	}
	op = b[0]
	copy(id[:], b[1:17])
	backendID = b[17:]
	switch {
	case op == NcclIDLookup && len(backendID) != 0:
		return 0, id, nil, fmt.Errorf("nccl id request: a lookup with %d bytes of backend id", len(backendID))
	case op == NcclIDRegister && (len(backendID) == 0 || len(backendID) > MaxNcclBackendID):
		return 0, id, nil, fmt.Errorf("nccl id request: backend id of %d bytes (1 to %d)", len(backendID), MaxNcclBackendID)
	case op != NcclIDLookup && op != NcclIDRegister:
		return 0, id, nil, fmt.Errorf("nccl id request: op %#x", op)
	}
	return op, id, backendID, nil
}

// socketIDs is the registry behind the server's socket.
type socketIDs struct{ c *net.UnixConn }

func (s socketIDs) ask(req []byte) ([]byte, error) {
	s.c.SetDeadline(time.Now().Add(budgetTimeout))
	if _, err := s.c.Write(req); err != nil {
		return nil, fmt.Errorf("instance nccl ids: %w", err)
	}
	buf := make([]byte, 1+MaxNcclBackendID)
	n, err := s.c.Read(buf)
	if err != nil {
		return nil, fmt.Errorf("instance nccl ids: %w", err)
	}
	if n == 0 {
		return nil, errors.New("instance nccl ids: empty reply")
	}
	switch buf[0] {
	case NcclIDOK:
		return buf[1:n], nil
	case NcclIDUnknown:
		return nil, errForeignID
	}
	return nil, errors.New("instance nccl ids: the server refused the request")
}

func (s socketIDs) register(id [16]byte, b []byte) error {
	_, err := s.ask(EncodeNcclIDRequest(NcclIDRegister, id, b))
	return err
}

func (s socketIDs) lookup(id [16]byte) ([]byte, error) {
	b, err := s.ask(EncodeNcclIDRequest(NcclIDLookup, id, nil))
	if err == nil && len(b) == 0 {
		err = errors.New("instance nccl ids: empty backend id")
	}
	return b, err
}

// openNcclSocket opens the registry socket inherited at NcclFD, if the server passed one.
func openNcclSocket() *net.UnixConn { return inheritedUnixConn(NcclFD, "nccl") }
