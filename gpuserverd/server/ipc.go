package server

import (
	"crypto/rand"
	"log/slog"
	"net"
	"os"
	"sync"
	"syscall"

	"gpucloud/gpuserverd/worker"
	"gpucloud/internal/sessiontoken"
)

// IPC between the processes of one instance (issue 14): a worker that exports an object (device
// memory, an interprocess event, a VMM allocation, a pool or a pool's allocation) files what its
// backend needs to open it elsewhere (NVIDIA's 64-byte handle, or a shareable handle's file
// descriptor) here, under its session's instance and a key of random bytes, over a socket pair
// (its fd worker.IpcFD); the guest sees only the key. A worker of the same instance opens the
// object by the key; a worker of another instance is told it does not exist.
//
// The registry holds a shareable handle's descriptor itself and passes a copy to each opener
// with SCM_RIGHTS: the opener then imports it as NVIDIA's samples do between their own
// processes. (pidfd_getfd would need ptrace rights over the exporter, which sibling workers do
// not have under Yama, and the exporter may have closed or reused the number by then.)
//
// An entry is listed (openable) until its exporter frees the object or ends; the descriptor is
// closed then. Memory an export carries is moved off the exporter's quota onto the entry
// (memledger.go, a holder of its own), so the instance pays for it once, however many of its
// processes map it, and for as long as any of them does: the charge goes when the entry is
// unlisted and every importer has closed it or ended.

// maxIpcEntriesPerInstance bounds what one instance's sessions may file.
const maxIpcEntriesPerInstance = 1024

type ipcKey struct {
	instance string
	key      [worker.IpcKeyLen]byte
}

type ipcEntry struct {
	kind   byte
	blob   []byte
	fd     *os.File // nil when the backend's handle is all bytes
	owner  uint64
	listed bool
	holds  map[uint64]int // importers' opens of a charged entry
	charge int            // the entry's holder in the memory ledger (negative), 0 when uncharged
}

type ipcRegistry struct {
	mu      sync.Mutex
	entries map[ipcKey]*ipcEntry
	perInst map[string]int
	owners  uint64
	charges int // the last ledger holder given to a charged entry (negative: no pid is)
}

func newIpcRegistry() *ipcRegistry {
	return &ipcRegistry{entries: map[ipcKey]*ipcEntry{}, perInst: map[string]int{}}
}

// newOwner names one worker's conversation, and the ledger holders of its charged entries.
func (r *ipcRegistry) newOwner() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.owners++
	return r.owners
}

// export files an entry; false when the instance holds too many. fd (may be nil) is the
// entry's from now on.
func (r *ipcRegistry) export(owner uint64, instance string, kind byte, blob []byte, fd *os.File, charged bool) ([worker.IpcKeyLen]byte, int, bool) {
	var key [worker.IpcKeyLen]byte
	rand.Read(key[:])
	r.mu.Lock()
	defer r.mu.Unlock()
	k := ipcKey{instance, key}
	if _, taken := r.entries[k]; taken || r.perInst[instance] >= maxIpcEntriesPerInstance {
		return key, 0, false
	}
	e := &ipcEntry{kind: kind, blob: append([]byte(nil), blob...), fd: fd, owner: owner, listed: true}
	if charged {
		r.charges--
		e.charge = r.charges
	}
	r.entries[k] = e
	r.perInst[instance]++
	return key, e.charge, true
}

// open returns the listed entry key names in instance, counting the opener's hold on a charged
// one; the descriptor is a duplicate the caller closes.
func (r *ipcRegistry) open(owner uint64, instance string, kind byte, key [worker.IpcKeyLen]byte) ([]byte, *os.File, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.entries[ipcKey{instance, key}]
	if !ok || !e.listed || e.kind != kind {
		return nil, nil, false
	}
	var f *os.File
	if e.fd != nil {
		nfd, err := syscall.Dup(int(e.fd.Fd()))
		if err != nil {
			return nil, nil, false
		}
		syscall.CloseOnExec(nfd)
		f = os.NewFile(uintptr(nfd), "ipc")
	}
	if e.charge != 0 {
		if e.holds == nil {
			e.holds = map[uint64]int{}
		}
		e.holds[owner]++
	}
	return e.blob, f, true
}

// release ends owner's hold on key (close) or, for its exporter, its listing (unlist); it
// returns the ledger holder whose charge is to go, or 0.
func (r *ipcRegistry) release(owner uint64, instance string, kind byte, key [worker.IpcKeyLen]byte, unlist bool) (charge int, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := ipcKey{instance, key}
	e, found := r.entries[k]
	if !found || e.kind != kind {
		return 0, false
	}
	if unlist {
		if e.owner != owner {
			return 0, false
		}
		e.unlist()
	} else {
		if e.charge == 0 {
			return 0, true // an uncharged entry counts no holds
		}
		if e.holds[owner] == 0 {
			return 0, false
		}
		if e.holds[owner]--; e.holds[owner] == 0 {
			delete(e.holds, owner)
		}
	}
	return r.dropIfDone(k, e), true
}

func (e *ipcEntry) unlist() {
	e.listed = false
	if e.fd != nil {
		e.fd.Close()
		e.fd = nil
	}
}

// dropIfDone forgets an entry nobody may open or holds, returning its ledger holder. r.mu held.
func (r *ipcRegistry) dropIfDone(k ipcKey, e *ipcEntry) int {
	if e.listed || len(e.holds) > 0 {
		return 0
	}
	delete(r.entries, k)
	if r.perInst[k.instance]--; r.perInst[k.instance] == 0 {
		delete(r.perInst, k.instance)
	}
	return e.charge
}

// drop ends owner's part (its worker has exited): its exports are unlisted, its holds let go.
// It returns the ledger holders whose charges are to go.
func (r *ipcRegistry) drop(owner uint64) []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	var charges []int
	for k, e := range r.entries {
		if e.owner == owner {
			e.unlist()
		}
		delete(e.holds, owner)
		if c := r.dropIfDone(k, e); c != 0 {
			charges = append(charges, c)
		}
	}
	return charges
}

// serveIpc answers one worker's registry requests until it closes its end. A malformed request
// ends the conversation (the worker is ours: that is a bug); its later IPC calls then fail.
func (s *Server) serveIpc(c *net.UnixConn, pid int, claims sessiontoken.Claims, log *slog.Logger) {
	owner := s.ipc.newOwner()
	defer func() {
		for _, charge := range s.ipc.drop(owner) {
			s.memory.drop(charge)
		}
	}()
	buf := make([]byte, 2*worker.MaxIpcBlob)
	oob := make([]byte, syscall.CmsgSpace(4*4))
	for {
		n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 {
			return
		}
		fd, ferr := worker.ReceivedFile(oob[:oobn])
		req, err := worker.DecodeIpcRequest(buf[:n])
		if err == nil {
			err = ferr
		}
		if err == nil && req.Op == worker.IpcExport && req.Bytes > 0 && int(req.Device) >= len(claims.GPUs) {
			err = errBadDevice
		}
		if err != nil {
			if fd != nil {
				fd.Close()
			}
			log.Warn("instance ipc registry: malformed request from the worker", "err", err)
			return
		}
		reply, out := s.answerIpc(owner, pid, claims, req, fd, log)
		var rights []byte
		if out != nil {
			rights = syscall.UnixRights(int(out.Fd()))
		}
		_, _, err = c.WriteMsgUnix(reply, rights, nil)
		if out != nil {
			out.Close()
		}
		if err != nil {
			return
		}
	}
}

// answerIpc serves one request; out is a descriptor to pass with the reply (the caller closes it).
func (s *Server) answerIpc(owner uint64, pid int, claims sessiontoken.Claims, req worker.IpcRequest, fd *os.File,
	log *slog.Logger) (reply []byte, out *os.File) {
	inst := claims.InstanceID
	switch req.Op {
	case worker.IpcExport:
		key, charge, ok := s.ipc.export(owner, inst, req.Kind, req.Blob, fd, req.Bytes > 0)
		if !ok {
			if fd != nil {
				fd.Close()
			}
			log.Info("ipc export refused: the instance holds too many exported objects", "limit", maxIpcEntriesPerInstance)
			return worker.EncodeIpcReply(worker.IpcRefused, req.Kind, key, nil), nil
		}
		if charge != 0 {
			s.memory.move(pid, charge, memKey{inst, claims.GPUs[req.Device]}, req.Bytes)
		}
		return worker.EncodeIpcReply(worker.IpcOK, req.Kind, key, nil), nil
	case worker.IpcOpen:
		if fd != nil {
			fd.Close()
		}
		blob, f, ok := s.ipc.open(owner, inst, req.Kind, req.Key)
		if !ok {
			log.Info("a session presented an IPC handle its instance did not export", "kind", req.Kind)
			return worker.EncodeIpcReply(worker.IpcUnknown, req.Kind, req.Key, nil), nil
		}
		return worker.EncodeIpcReply(worker.IpcOK, req.Kind, req.Key, blob), f
	}
	if fd != nil {
		fd.Close()
	}
	charge, ok := s.ipc.release(owner, inst, req.Kind, req.Key, req.Op == worker.IpcUnlist)
	if !ok {
		return worker.EncodeIpcReply(worker.IpcUnknown, req.Kind, req.Key, nil), nil
	}
	if charge != 0 {
		s.memory.drop(charge)
	}
	return worker.EncodeIpcReply(worker.IpcOK, req.Kind, req.Key, nil), nil
}
