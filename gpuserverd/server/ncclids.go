package server

import (
	"log/slog"
	"net"
	"sync"

	"gpucloud/gpuserverd/worker"
	"gpucloud/internal/sessiontoken"
)

// NCCL unique ids are an instance's (issue 19): a worker that issues one files the backend's id
// behind it here, under its session's instance, over a socket pair (its fd worker.NcclFD); a
// worker of the same instance (another process of the VM: one per GPU, as torchrun starts them)
// looks it up to join the communicator; a worker of another instance is told it does not exist.
// An id goes when the worker that issued it exits (NCCL's rendezvous lived in that process).

// maxNcclIDsPerInstance bounds what one instance's sessions may file.
const maxNcclIDsPerInstance = 4096

type ncclKey struct {
	instance string
	id       [16]byte
}

type ncclEntry struct {
	backendID []byte
	owner     uint64
}

type ncclIDs struct {
	mu      sync.Mutex
	ids     map[ncclKey]ncclEntry
	perInst map[string]int
	owners  uint64
}

// newOwner names one worker's conversation (not its pid, which a later process may reuse
// before the ended one's ids are dropped).
func (r *ncclIDs) newOwner() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.owners++
	return r.owners
}

func newNcclIDs() *ncclIDs {
	return &ncclIDs{ids: map[ncclKey]ncclEntry{}, perInst: map[string]int{}}
}

// register files id under instance for owner's worker; false when it is taken or the instance
// holds too many.
func (r *ncclIDs) register(owner uint64, instance string, id [16]byte, backendID []byte) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := ncclKey{instance, id}
	if _, ok := r.ids[k]; ok || r.perInst[instance] >= maxNcclIDsPerInstance {
		return false
	}
	r.ids[k] = ncclEntry{backendID: append([]byte(nil), backendID...), owner: owner}
	r.perInst[instance]++
	return true
}

func (r *ncclIDs) lookup(instance string, id [16]byte) ([]byte, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.ids[ncclKey{instance, id}]
	return e.backendID, ok
}

// drop forgets the ids owner's worker issued (it has exited).
func (r *ncclIDs) drop(owner uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, e := range r.ids {
		if e.owner == owner {
			delete(r.ids, k)
			if r.perInst[k.instance]--; r.perInst[k.instance] == 0 {
				delete(r.perInst, k.instance)
			}
		}
	}
}

// serveNccl answers one worker's registry requests until it closes its end. A malformed request
// ends the conversation (the worker is ours: that is a bug); its later NCCL calls then fail.
func (s *Server) serveNccl(c *net.UnixConn, claims sessiontoken.Claims, log *slog.Logger) {
	owner := s.nccl.newOwner()
	defer s.nccl.drop(owner)
	buf := make([]byte, 17+worker.MaxNcclBackendID+1)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return
		}
		op, id, backendID, err := worker.DecodeNcclIDRequest(buf[:n])
		if err != nil {
			log.Warn("instance nccl ids: malformed request from the worker", "err", err)
			return
		}
		reply := []byte{worker.NcclIDOK}
		switch op {
		case worker.NcclIDRegister:
			if !s.nccl.register(owner, claims.InstanceID, id, backendID) {
				reply[0] = worker.NcclIDRefused
			}
		case worker.NcclIDLookup:
			if b, ok := s.nccl.lookup(claims.InstanceID, id); ok {
				reply = append(reply, b...)
			} else {
				reply[0] = worker.NcclIDUnknown
				log.Info("a session presented an NCCL unique id its instance was not issued")
			}
		}
		if _, err := c.Write(reply); err != nil {
			return
		}
	}
}
