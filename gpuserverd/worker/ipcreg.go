package worker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"gpucloud/gpuserverd/backend"
)

// IpcFD is the socket on which a worker files the objects its session exports to the other
// processes of its instance (cuIpcGetMemHandle, cuMemExportToShareableHandle, ...) in the
// server's registry (gpuserverd/server/ipc.go), and opens those another session of the same
// instance filed. The registry keeps what the backend needs to open the object in another
// process (NVIDIA's 64-byte IPC handle, or a shareable handle's file descriptor, passed with
// SCM_RIGHTS) behind random keys; a guest only ever sees a key. Without the socket (a worker run
// alone, or adopted by a later gpuserverd) IPC is refused.
const IpcFD = 9

// The registry's messages, one per seqpacket. A request is the op, the object's kind (backend.IpcMemory
// ... backend.IpcPoolPointer), the session's device index (u32), the bytes the export moves off the
// session's quota (u64), the key (32 bytes; zero on export) and, on export only, the backend's
// blob (0 to MaxIpcBlob bytes), with at most one file descriptor attached. A reply is a status
// byte, the kind, the key and, on open, the blob, with the entry's descriptor attached if it
// has one. Little-endian.
const (
	IpcExport = 'E' // file an object: the reply carries its new key
	IpcOpen   = 'O' // open an object of the instance: the reply carries its blob (and fd)
	IpcClose  = 'C' // an importer lets go of what it opened
	IpcUnlist = 'U' // the exporter's object is gone: no one may open it any more

	IpcOK      = 0
	IpcUnknown = 1 // no such key in this instance
	IpcRefused = 2 // the instance holds too many entries, or the request does not fit the entry

	IpcKeyLen    = 32
	MaxIpcBlob   = 256
	ipcHeaderLen = 1 + 1 + 4 + 8 + IpcKeyLen
)

// IpcRequest is one request to the registry.
type IpcRequest struct {
	Op     byte
	Kind   byte
	Device uint32
	Bytes  uint64
	Key    [IpcKeyLen]byte
	Blob   []byte
}

// EncodeIpcRequest is a worker's request.
func EncodeIpcRequest(r IpcRequest) []byte {
	b := make([]byte, ipcHeaderLen, ipcHeaderLen+len(r.Blob))
	b[0], b[1] = r.Op, r.Kind
	binary.LittleEndian.PutUint32(b[2:], r.Device)
	binary.LittleEndian.PutUint64(b[6:], r.Bytes)
	copy(b[14:], r.Key[:])
	return append(b, r.Blob...)
}

// DecodeIpcRequest parses a request; it names what is wrong with a malformed one.
func DecodeIpcRequest(b []byte) (IpcRequest, error) {
	var r IpcRequest
	if len(b) < ipcHeaderLen {
		return r, fmt.Errorf("ipc request: %d bytes, want at least %d", len(b), ipcHeaderLen)
	}
	r.Op, r.Kind = b[0], b[1]
	r.Device = binary.LittleEndian.Uint32(b[2:])
	r.Bytes = binary.LittleEndian.Uint64(b[6:])
	copy(r.Key[:], b[14:ipcHeaderLen])
	if rest := b[ipcHeaderLen:]; len(rest) > 0 {
		r.Blob = rest
	}
	switch {
	case r.Op != IpcExport && r.Op != IpcOpen && r.Op != IpcClose && r.Op != IpcUnlist:
		return IpcRequest{}, fmt.Errorf("ipc request: op %#x", r.Op)
	case r.Kind < backend.IpcMemory || r.Kind > backend.IpcPoolPointer:
		return IpcRequest{}, fmt.Errorf("ipc request: kind %d", r.Kind)
	case r.Op == IpcExport && len(r.Blob) > MaxIpcBlob:
		return IpcRequest{}, fmt.Errorf("ipc request: a blob of %d bytes (at most %d)", len(r.Blob), MaxIpcBlob)
	case r.Op != IpcExport && (len(r.Blob) != 0 || r.Bytes != 0):
		return IpcRequest{}, fmt.Errorf("ipc request: op %c with a blob of %d bytes and %d bytes to move", r.Op, len(r.Blob), r.Bytes)
	}
	return r, nil
}

// EncodeIpcReply is the server's answer.
func EncodeIpcReply(status, kind byte, key [IpcKeyLen]byte, blob []byte) []byte {
	b := append([]byte{status, kind}, key[:]...)
	return append(b, blob...)
}

// DecodeIpcReply parses the server's answer.
func DecodeIpcReply(b []byte) (status, kind byte, key [IpcKeyLen]byte, blob []byte, err error) {
	if len(b) < 2+IpcKeyLen || len(b) > 2+IpcKeyLen+MaxIpcBlob || b[0] > IpcRefused {
		return 0, 0, key, nil, fmt.Errorf("ipc reply: malformed (%d bytes)", len(b))
	}
	copy(key[:], b[2:])
	return b[0], b[1], key, b[2+IpcKeyLen:], nil
}

// errForeignHandle is the registry's answer to a key the instance never filed (or no longer
// lists).
var errForeignHandle = errors.New("the handle names nothing this instance exported")

// errRegistryRefused is the registry's refusal: the instance holds too many entries.
var errRegistryRefused = errors.New("the server refused the export (the instance holds too many exported objects)")

// ipcRegistry is the server's registry of the instance's exported objects.
type ipcRegistry interface {
	// export files blob (and fd, which it closes) and returns the new key.
	export(kind byte, device uint32, bytes uint64, blob []byte, fd *os.File) ([IpcKeyLen]byte, error)
	// open returns the blob (and a descriptor, or nil) filed under key.
	open(kind byte, key [IpcKeyLen]byte) ([]byte, *os.File, error)
	// close and unlist tell the registry an import or an export is gone.
	close(kind byte, key [IpcKeyLen]byte) error
	unlist(kind byte, key [IpcKeyLen]byte) error
}

// socketRegistry is the registry behind the server's socket; mu keeps a request and its reply
// together.
type socketRegistry struct {
	mu sync.Mutex
	c  *net.UnixConn
}

func (s *socketRegistry) ask(r IpcRequest, fd *os.File) ([]byte, *os.File, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.c.SetDeadline(time.Now().Add(budgetTimeout))
	var oob []byte
	if fd != nil {
		oob = syscall.UnixRights(int(fd.Fd()))
	}
	if _, _, err := s.c.WriteMsgUnix(EncodeIpcRequest(r), oob, nil); err != nil {
		return nil, nil, fmt.Errorf("instance ipc registry: %w", err)
	}
	buf := make([]byte, 2+IpcKeyLen+MaxIpcBlob+1)
	oobBuf := make([]byte, syscall.CmsgSpace(4*4))
	n, oobn, _, _, err := s.c.ReadMsgUnix(buf, oobBuf)
	if err != nil {
		return nil, nil, fmt.Errorf("instance ipc registry: %w", err)
	}
	got, err := ReceivedFile(oobBuf[:oobn])
	if err != nil {
		return nil, nil, fmt.Errorf("instance ipc registry: %w", err)
	}
	status, kind, _, _, err := DecodeIpcReply(buf[:n])
	if err == nil && kind != r.Kind {
		err = fmt.Errorf("ipc reply: kind %d to a request of kind %d", kind, r.Kind)
	}
	if err == nil && status != IpcOK {
		err = errRegistryRefused
		if status == IpcUnknown {
			err = errForeignHandle
		}
	}
	if err != nil {
		if got != nil {
			got.Close()
		}
		return nil, nil, err
	}
	return buf[:n], got, nil
}

// ReceivedFile is the one descriptor a message carried, or nil; more than one is an error (and
// all are closed).
func ReceivedFile(oob []byte) (*os.File, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("control message: %w", err)
	}
	var fds []int
	for _, m := range msgs {
		if f, err := syscall.ParseUnixRights(&m); err == nil {
			fds = append(fds, f...)
		}
	}
	if len(fds) > 1 {
		for _, fd := range fds {
			syscall.Close(fd)
		}
		return nil, fmt.Errorf("%d descriptors in one message", len(fds))
	}
	if len(fds) == 0 {
		return nil, nil
	}
	return os.NewFile(uintptr(fds[0]), "ipc"), nil
}

func (s *socketRegistry) export(kind byte, device uint32, bytes uint64, blob []byte, fd *os.File) ([IpcKeyLen]byte, error) {
	var key [IpcKeyLen]byte
	if fd != nil {
		defer fd.Close()
	}
	b, got, err := s.ask(IpcRequest{Op: IpcExport, Kind: kind, Device: device, Bytes: bytes, Blob: blob}, fd)
	if got != nil {
		got.Close()
	}
	if err == nil {
		copy(key[:], b[2:])
	}
	return key, err
}

func (s *socketRegistry) open(kind byte, key [IpcKeyLen]byte) ([]byte, *os.File, error) {
	b, f, err := s.ask(IpcRequest{Op: IpcOpen, Kind: kind, Key: key}, nil)
	if err != nil {
		return nil, nil, err
	}
	return append([]byte(nil), b[2+IpcKeyLen:]...), f, nil
}

func (s *socketRegistry) close(kind byte, key [IpcKeyLen]byte) error {
	_, f, err := s.ask(IpcRequest{Op: IpcClose, Kind: kind, Key: key}, nil)
	if f != nil {
		f.Close()
	}
	return err
}

func (s *socketRegistry) unlist(kind byte, key [IpcKeyLen]byte) error {
	_, f, err := s.ask(IpcRequest{Op: IpcUnlist, Kind: kind, Key: key}, nil)
	if f != nil {
		f.Close()
	}
	return err
}

// openIpcSocket opens the registry socket inherited at IpcFD, if the server passed one.
func openIpcSocket() *net.UnixConn { return inheritedUnixConn(IpcFD, "ipc") }
