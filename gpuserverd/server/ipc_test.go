package server

import (
	"io"
	"log/slog"
	"os"
	"testing"

	"gpucloud/gpuserverd/worker"
	"gpucloud/internal/sessiontoken"
)

func ipcServer() *Server {
	return &Server{ipc: newIpcRegistry(), memory: newMemoryLedger()}
}

func ipcClaims(inst string) sessiontoken.Claims {
	return sessiontoken.Claims{InstanceID: inst, GPUs: []string{"GPU-0"}, MemoryQuota: 1 << 30}
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// ask serves one request for owner, returning the reply's status, key and blob and the
// descriptor it carries.
func ask(t *testing.T, s *Server, owner uint64, pid int, c sessiontoken.Claims, r worker.IpcRequest, fd *os.File) (byte, [worker.IpcKeyLen]byte, []byte, *os.File) {
	t.Helper()
	reply, out := s.answerIpc(owner, pid, c, r, fd, quiet)
	status, kind, key, blob, err := worker.DecodeIpcReply(reply)
	if err != nil || kind != r.Kind {
		t.Fatalf("reply %x: %v", reply, err)
	}
	return status, key, blob, out
}

// An entry opens only in the instance that filed it, with its blob and a copy of its descriptor,
// and only while its exporter lists it.
func TestIpcEntryOpensOnlyInItsInstance(t *testing.T) {
	s := ipcServer()
	a, b, c := s.ipc.newOwner(), s.ipc.newOwner(), s.ipc.newOwner()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	st, key, _, _ := ask(t, s, a, 10, ipcClaims("inst-1"), worker.IpcRequest{Op: worker.IpcExport, Kind: 3, Blob: []byte("nv")}, w)
	if st != worker.IpcOK {
		t.Fatalf("export: status %d", st)
	}
	open := worker.IpcRequest{Op: worker.IpcOpen, Kind: 3, Key: key}
	if st, _, _, f := ask(t, s, c, 12, ipcClaims("inst-2"), open, nil); st != worker.IpcUnknown || f != nil {
		t.Fatalf("another instance opened the entry: status %d", st)
	}
	if st, _, _, _ := ask(t, s, b, 11, ipcClaims("inst-1"), worker.IpcRequest{Op: worker.IpcOpen, Kind: 1, Key: key}, nil); st != worker.IpcUnknown {
		t.Fatalf("opened as another kind: status %d", st)
	}
	st, _, blob, f := ask(t, s, b, 11, ipcClaims("inst-1"), open, nil)
	if st != worker.IpcOK || string(blob) != "nv" || f == nil {
		t.Fatalf("same instance: status %d blob %q fd %v", st, blob, f)
	}
	f.Write([]byte("through the copy")) // the registry's copy is the exporter's pipe
	f.Close()
	got := make([]byte, 16)
	if _, err := io.ReadFull(r, got); err != nil || string(got) != "through the copy" {
		t.Fatalf("read %q %v", got, err)
	}
	// Only the exporter unlists; then nobody opens it.
	if st, _, _, _ := ask(t, s, b, 11, ipcClaims("inst-1"), worker.IpcRequest{Op: worker.IpcUnlist, Kind: 3, Key: key}, nil); st != worker.IpcUnknown {
		t.Fatalf("an importer unlisted the entry: status %d", st)
	}
	ask(t, s, a, 10, ipcClaims("inst-1"), worker.IpcRequest{Op: worker.IpcUnlist, Kind: 3, Key: key}, nil)
	if st, _, _, _ := ask(t, s, b, 11, ipcClaims("inst-1"), open, nil); st != worker.IpcUnknown {
		t.Fatalf("an unlisted entry opened: status %d", st)
	}
	if len(s.ipc.entries) != 0 || s.ipc.perInst["inst-1"] != 0 {
		t.Fatalf("unlisted, unheld entry kept: %d", len(s.ipc.entries))
	}
}

// An export's memory moves off the exporter onto the entry: the instance pays for it once, for as
// long as the exporter lists it or an importer holds it, and no longer.
func TestIpcChargeFollowsTheLastHolder(t *testing.T) {
	for _, exporterEnds := range []bool{false, true} {
		s := ipcServer()
		c := ipcClaims("inst-1")
		k := memKey{"inst-1", "GPU-0"}
		a, b := s.ipc.newOwner(), s.ipc.newOwner()
		if ok, _ := s.memory.change(10, k, c.MemoryQuota, 1<<20); !ok {
			t.Fatal("reservation refused")
		}
		s.memory.change(10, k, c.MemoryQuota, 4096) // another allocation of the exporter
		_, key, _, _ := ask(t, s, a, 10, c, worker.IpcRequest{Op: worker.IpcExport, Kind: 1, Bytes: 1 << 20, Blob: []byte("h")}, nil)
		ask(t, s, b, 11, c, worker.IpcRequest{Op: worker.IpcOpen, Kind: 1, Key: key}, nil)
		if got := s.memory.instanceBytes("inst-1", "GPU-0"); got != 1<<20+4096 {
			t.Fatalf("after the export: %d", got)
		}
		// The exporter's free gives back nothing through the ledger (its worker gave the bytes
		// to the entry); a give-back for the other allocation leaves the export charged.
		s.memory.change(10, k, c.MemoryQuota, -4096)
		if exporterEnds {
			for _, ch := range s.ipc.drop(a) {
				s.memory.drop(ch)
			}
			s.memory.drop(10)
		} else {
			ask(t, s, a, 10, c, worker.IpcRequest{Op: worker.IpcUnlist, Kind: 1, Key: key}, nil)
		}
		if got := s.memory.instanceBytes("inst-1", "GPU-0"); got != 1<<20 {
			t.Fatalf("exporter ended %v, importer holding: %d", exporterEnds, got)
		}
		if st, _, _, _ := ask(t, s, b, 11, c, worker.IpcRequest{Op: worker.IpcClose, Kind: 1, Key: key}, nil); st != worker.IpcOK {
			t.Fatalf("close: status %d", st)
		}
		if got := s.memory.instanceBytes("inst-1", "GPU-0"); got != 0 || len(s.ipc.entries) != 0 {
			t.Fatalf("after the last holder: %d bytes, %d entries", got, len(s.ipc.entries))
		}
	}
}

// An instance files at most its share; entries go with their exporter's worker.
func TestIpcEntriesBounded(t *testing.T) {
	s := ipcServer()
	a := s.ipc.newOwner()
	c := ipcClaims("inst-1")
	for i := range maxIpcEntriesPerInstance {
		if st, _, _, _ := ask(t, s, a, 10, c, worker.IpcRequest{Op: worker.IpcExport, Kind: 2, Blob: []byte{1}}, nil); st != worker.IpcOK {
			t.Fatalf("export %d: status %d", i, st)
		}
	}
	if st, _, _, _ := ask(t, s, a, 10, c, worker.IpcRequest{Op: worker.IpcExport, Kind: 2, Blob: []byte{1}}, nil); st != worker.IpcRefused {
		t.Fatalf("an export past the bound: status %d", st)
	}
	if st, _, _, _ := ask(t, s, a, 10, ipcClaims("inst-2"), worker.IpcRequest{Op: worker.IpcExport, Kind: 2}, nil); st != worker.IpcOK {
		t.Fatalf("another instance's export refused: status %d", st)
	}
	s.ipc.drop(a)
	if len(s.ipc.entries) != 0 || len(s.ipc.perInst) != 0 {
		t.Fatalf("entries outlived their worker: %d", len(s.ipc.entries))
	}
}
