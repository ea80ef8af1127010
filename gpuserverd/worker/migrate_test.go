package worker

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/backend/sim"
	"gpucloud/gpuserverd/wire"
)

// streamGuest is a guest that resumes as the C library does: it counts the stream's bytes (what
// it sent after its Hello, what it received from the HelloReply on) and keeps all it sent.
type streamGuest struct {
	t       testing.TB
	conn    net.Conn
	req     uint32
	in      uint64
	sent    []byte
	secret  []byte
	session string
}

func (g *streamGuest) send(m wire.Message, flags uint16) uint32 {
	g.t.Helper()
	g.req++
	f := wire.AppendFrame(nil, m, flags, g.req)
	g.sent = append(g.sent, f...)
	if _, err := g.conn.Write(f); err != nil {
		g.t.Fatal(err)
	}
	return g.req
}

// next reads the next frame, whatever it is.
func (g *streamGuest) next() (wire.Header, []byte) {
	g.t.Helper()
	g.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	h, p, err := wire.ReadFrame(g.conn, nil)
	if err != nil {
		g.t.Fatal(err)
	}
	g.in += uint64(wire.HeaderSize + len(p))
	return h, p
}

func (g *streamGuest) read(m wire.Message) {
	g.t.Helper()
	h, p := g.next()
	if h.Type != m.Type() {
		g.t.Fatalf("got %s, want %s", h.Type, m.Type())
	}
	if err := m.Decode(p); err != nil {
		g.t.Fatal(err)
	}
}

func (g *streamGuest) call(m, reply wire.Message) {
	g.t.Helper()
	g.send(m, 0)
	g.read(reply)
}

// resumeOn presents Resume on conn (the worker's end offered to rc) and resends what the worker
// says it has not received.
func (g *streamGuest) resumeOn(rc *resumeConn, guestEnd, workerEnd net.Conn) {
	g.t.Helper()
	m := wire.Resume{Version: wire.Version, SessionID: g.session, Secret: g.secret, Received: g.in}
	if err := rc.offer(workerEnd, m.Append(nil)); err != nil {
		g.t.Fatal(err)
	}
	g.conn = guestEnd
	guestEnd.SetReadDeadline(time.Now().Add(10 * time.Second))
	h, p, err := wire.ReadFrame(guestEnd, nil)
	var rr wire.ResumeReply
	if err != nil || h.Type != wire.TypeResumeReply || rr.Decode(p) != nil || rr.Result != 0 {
		g.t.Fatalf("resume reply %v %+v %v", h.Type, rr, err)
	}
	if rr.Received > uint64(len(g.sent)) {
		g.t.Fatalf("the worker says it received %d of the %d bytes sent", rr.Received, len(g.sent))
	}
	if _, err := guestEnd.Write(g.sent[rr.Received:]); err != nil {
		g.t.Fatal(err)
	}
}

// serveTCP serves a session on a loopback TCP connection whose stream may resume, and opens the
// resume window as the guest library does.
func serveTCP(t testing.TB, b backend.Backend) (*streamGuest, *Session, *resumeConn) {
	t.Helper()
	guest, workerSide := tcpPair(t)
	rc := newResumeConn(workerSide, "s1")
	s := NewSession(Config{SessionID: "s1", Tier: "shared", Devices: []int{0}}, b, rc, slog.Default())
	s.resume = rc
	go s.Serve(context.Background())
	var hello wire.HelloReply
	_, p, err := wire.ReadFrame(guest, nil)
	if err != nil || hello.Decode(p) != nil {
		t.Fatalf("hello: %v", err)
	}
	// The guest counts the worker's stream from the HelloReply on, as the worker does.
	g := &streamGuest{t: t, conn: guest, session: "s1", in: uint64(wire.HeaderSize + len(p))}
	var open wire.ResumeOpenReply
	g.call(&wire.ResumeOpen{WindowMs: 30_000}, &open)
	g.secret = open.Secret
	return g, s, rc
}

// serveTarget is a migration's target worker on fromA: it reads the image, rebuilds the session
// on a backend of its own (another server's), answers MigrateReady and serves; the session is sent
// on ready once restored (nil when the image could not be read).
// Its simulated GPU is the source's (sim.UUID(0)), so the source hands the memory over unless it
// was asked to copy.
func serveTarget(fromA net.Conn, cfg Config, log *slog.Logger, ready chan<- *Session) {
	serveTargetOn(fromA, cfg, sim.UUID(0), log, ready)
}

// serveTargetOn is serveTarget on the simulated GPU uuid.
func serveTargetOn(fromA net.Conn, cfg Config, uuid string, log *slog.Logger, ready chan<- *Session) {
	img, chunks, err := readMigration(fromA, []string{uuid})
	if err != nil {
		writeReady(fromA, nil, err)
		if ready != nil {
			ready <- nil
		}
		return
	}
	secret, window := img.secretOrNew(true)
	rc := newRestoredResumeConn(cfg.SessionID, img.In, img.Out, secret, time.Duration(window)*time.Millisecond)
	s := NewSession(cfg, sim.New(1, 4<<30), rc, log)
	s.resume = rc
	s.Restore(img, chunks, func(err error) { writeReady(fromA, secret, err) })
	if ready != nil {
		ready <- s
	}
	s.Serve(context.Background())
}

func u64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

// setUp gives the session state to carry: a module with a kernel, a stream, an event, two
// allocations with contents. It returns the function and the allocations.
func setUp(g *streamGuest) (fn backend.Handle, a, out uint64, stream backend.Handle) {
	var hr wire.HandleReply
	g.call(&wire.ModuleLoad{Image: []byte("GPUSIM-MODULE 1\nkernel fill_u32\n")}, &hr)
	mod := hr.Handle
	g.call(&wire.ModuleGetFunction{Module: mod, Name: "fill_u32"}, &hr)
	fn = backend.Handle(hr.Handle)
	g.call(&wire.StreamCreate{Flags: 1}, &hr)
	stream = backend.Handle(hr.Handle)
	g.call(&wire.MemAlloc{Bytes: 4096}, &hr)
	a = hr.Handle
	g.call(&wire.MemAlloc{Bytes: 64}, &hr)
	out = hr.Handle
	var st wire.Status
	g.call(&wire.MemcpyHtoD{Dst: a, Data: bytes.Repeat([]byte{0xab}, 4096)}, &st)
	return fn, a, out, stream
}

// fill launches fill_u32(out, v, n) on stream, without waiting.
func fill(g *streamGuest, fn backend.Handle, out uint64, n, v uint32, stream backend.Handle) {
	params := append(u64(out), binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, v), n)...)
	g.send(&wire.LaunchKernel{Function: uint64(fn), GridX: 1, GridY: 1, GridZ: 1, BlockX: 64, BlockY: 1, BlockZ: 1,
		Stream: uint64(stream), Params: params}, wire.FlagNoReply)
}

func dtoh(g *streamGuest, src, n uint64) []byte {
	g.t.Helper()
	g.send(&wire.MemcpyDtoH{Src: src, Bytes: n}, 0)
	var d wire.MemcpyDtoHData
	g.read(&d)
	if d.Result != 0 {
		g.t.Fatalf("DtoH of %#x: result %d", src, d.Result)
	}
	return d.Data
}

// A live migration moves a running session to another worker (here: another backend, standing
// for another server): calls the guest sent after the old worker stopped are answered by the new
// one exactly once, and handles, pointers and contents are what they were; whether the memory
// was copied through the connection or handed over on the same GPU.
func TestMigrateMovesARunningSession(t *testing.T) {
	for _, via := range []string{"stream", "handover"} {
		t.Run(via, func(t *testing.T) { testMigrateMoves(t, via) })
	}
}

func testMigrateMoves(t *testing.T, via string) {
	if via == "handover" {
		t.Setenv(HandoverEnv, "1")
	}
	g, a, _ := serveTCP(t, sim.New(1, 1<<30))
	var ledgerMu sync.Mutex
	held := int64(0) // what the old worker holds on its server's ledger of the instance
	a.exec.Lock()
	a.cfg.MemoryQuota = 1 << 30
	a.SetMemoryLedger(func(_ int, delta int64) (bool, uint64, error) {
		ledgerMu.Lock()
		defer ledgerMu.Unlock()
		held += delta
		return true, uint64(held), nil
	})
	a.exec.Unlock()
	fn, buf, out, stream := setUp(g)
	fill(g, fn, out, 16, 7, stream)

	// The target worker: reads the image, rebuilds, answers MigrateReady, waits for the guest.
	toB, fromA := tcpPair(t)
	bReady := make(chan *Session, 1)
	go serveTarget(fromA, Config{SessionID: "s1", Tier: "shared", Devices: []int{0}}, slog.Default(), bReady)
	if err := a.Migrate(toB, "b.example:7070", via == "stream"); err != nil {
		t.Fatal(err)
	}
	b := <-bReady
	if b == nil {
		t.Fatal("the target could not read the image")
	}
	// Sent after the old worker stopped: it must not run there, and must run on the new one.
	fill(g, fn, out+32, 4, 9, stream)
	h, p := g.next()
	var redirect wire.MigrateRedirect
	if h.Type != wire.TypeMigrateRedirect || redirect.Decode(p) != nil || redirect.Address != "b.example:7070" {
		t.Fatalf("the guest got %s, want MigrateRedirect to b.example:7070", h.Type)
	}
	g.secret = redirect.Secret
	guestB, workerB := tcpPair(t)
	g.resumeOn(b.resume, guestB, workerB)

	var st wire.Status
	g.call(&wire.StreamSynchronize{Stream: uint64(stream)}, &st)
	if st.Result != 0 {
		t.Fatalf("the moved stream: %+v", st)
	}
	got := dtoh(g, out, 64)
	want := bytes.Repeat(binary.LittleEndian.AppendUint32(nil, 7), 8)
	want = append(want, bytes.Repeat(binary.LittleEndian.AppendUint32(nil, 9), 4)...)
	want = append(want, bytes.Repeat(binary.LittleEndian.AppendUint32(nil, 7), 4)...)
	if !bytes.Equal(got, want) {
		t.Fatalf("after the move the output reads\n%x\nwant\n%x", got, want)
	}
	if got := dtoh(g, buf, 4096); !bytes.Equal(got, bytes.Repeat([]byte{0xab}, 4096)) {
		t.Fatal("the pre-copied allocation lost its contents")
	}
	var hr wire.HandleReply
	g.call(&wire.MemAlloc{Bytes: 8}, &hr)
	if hr.Result != 0 || hr.Handle <= out {
		t.Fatalf("a new allocation on the target: %+v", hr)
	}
	snap := a.Stats.Snapshot()
	// The old worker lingers for its guest's close, but holds nothing here any more: a move of
	// the instance back to this server must find its quota free.
	ledgerMu.Lock()
	if held != 0 || snap.MemoryBytes != 0 {
		t.Errorf("the old worker still holds %d bytes on the ledger, %d in its figures", held, snap.MemoryBytes)
	}
	ledgerMu.Unlock()
	if snap.Migration == nil || snap.Migration.State != "done" || snap.HandedOff.IsZero() || snap.Migration.Via != via {
		t.Fatalf("the old worker's snapshot: %+v", snap.Migration)
	}
	if p := snap.Migration; via == "handover" && p.HandedBytes < 4096+64 ||
		via == "stream" && (p.HandedBytes != 0 || p.CopiedBytes < 4096+64) {
		t.Fatalf("via %s: %d bytes handed over, %d copied", via, p.HandedBytes, p.CopiedBytes)
	}
	if snap := b.Stats.Snapshot(); !snap.BillFrom.IsZero() {
		// BillFrom is set by restoreSource's done in a worker process; here the test's own done
		// does not, so a value means something else set it.
		t.Fatalf("unexpected bill-from %v", snap.BillFrom)
	}
}

// A migration whose target refuses leaves the session serving where it was.
func TestMigrateRefusedByTargetLeavesTheSession(t *testing.T) {
	g, a, _ := serveTCP(t, sim.New(1, 1<<30))
	_, _, out, _ := setUp(g)
	toB, fromA := tcpPair(t)
	pausedWhileTargetHeldImage := make(chan time.Time, 1)
	go func() {
		readImage(fromA)
		// The old server must already know it may bill no further than the pause: the target
		// bills from it as soon as it restores.
		pausedWhileTargetHeldImage <- a.Stats.Snapshot().PausedAt
		writeReady(fromA, nil, errors.New("no room"))
	}()
	err := a.Migrate(toB, "b:1", false)
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("no room")) {
		t.Fatalf("migration to a refusing target: %v", err)
	}
	if p := <-pausedWhileTargetHeldImage; p.IsZero() {
		t.Fatal("the snapshot did not name the pause while the target held the image")
	}
	if p := a.Stats.Snapshot().PausedAt; !p.IsZero() {
		t.Fatalf("the pause %v still bounds billing after the move failed", p)
	}
	if got := dtoh(g, out, 4); len(got) != 4 {
		t.Fatal("the session stopped serving after a failed migration")
	}
	if snap := a.Stats.Snapshot(); snap.Migration.State != "failed" || !snap.HandedOff.IsZero() {
		t.Fatalf("snapshot after a failed migration: %+v", snap.Migration)
	}
}

// A checkpoint written while the session runs restores into a fresh session that the guest
// resumes with the secret it holds.
func TestCheckpointRestoresIntoAFreshWorker(t *testing.T) {
	g, a, rcA := serveTCP(t, sim.New(1, 1<<30))
	fn, _, out, stream := setUp(g)
	fill(g, fn, out, 16, 5, stream)
	var st wire.Status
	g.call(&wire.Synchronize{}, &st)
	var image bytes.Buffer
	a.exec.Lock()
	err := a.Checkpoint(&image)
	a.exec.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	rcA.Close() // the old worker is gone

	img, chunks, err := readImage(&image)
	if err != nil {
		t.Fatal(err)
	}
	secret, window := img.secretOrNew(false)
	rc := newRestoredResumeConn("s1", img.In, img.Out, secret, time.Duration(window)*time.Millisecond)
	b := NewSession(Config{SessionID: "s1", Tier: "shared", Devices: []int{0}}, sim.New(1, 1<<30), rc, slog.Default())
	b.resume = rc
	if err := b.Restore(img, chunks, nil); err != nil {
		t.Fatal(err)
	}
	go b.Serve(context.Background())
	guestB, workerB := tcpPair(t)
	g.resumeOn(rc, guestB, workerB)
	want := bytes.Repeat(binary.LittleEndian.AppendUint32(nil, 5), 16)
	if got := dtoh(g, out, 64); !bytes.Equal(got, want) {
		t.Fatalf("restored output %x", got)
	}
}

func TestReadImageRefusesBadStreams(t *testing.T) {
	good := func() *bytes.Buffer {
		var b bytes.Buffer
		iw := newImageWriter(&b)
		iw.image(&SessionImage{Version: ImageVersion, SessionID: "s", Devices: []*DeviceImage{{Context: &backend.ContextImage{
			Regions: []backend.Region{{Addr: 0x1000, Bytes: 16}}}}}})
		iw.data(0, 0x1000, make([]byte, 16))
		iw.end()
		return &b
	}
	if _, _, err := readImage(good()); err != nil {
		t.Fatalf("a good image: %v", err)
	}
	for name, mutate := range map[string]func([]byte) []byte{
		"truncated":       func(b []byte) []byte { return b[:len(b)-5] },
		"unknown record":  func(b []byte) []byte { return append([]byte{'Z'}, b...) },
		"no end":          func(b []byte) []byte { return b[:len(b)-1] },
		"outside regions": func(b []byte) []byte { return bytes.Replace(b, u64(0x1000), u64(0x1008), 1) },
	} {
		if _, _, err := readImage(bytes.NewReader(mutate(good().Bytes()))); err == nil {
			t.Errorf("%s: read", name)
		}
	}
	var b bytes.Buffer
	iw := newImageWriter(&b)
	iw.image(&SessionImage{Version: 99})
	iw.end()
	if _, _, err := readImage(&b); err == nil {
		t.Error("a future version: read")
	}
}

// The target charges the moved memory to the session's quota there (its own token's): a session
// holding more than that is refused by the target, names the quota, and runs on where it was.
func TestMigrateRespectsTheTargetsQuota(t *testing.T) {
	g, a, _ := serveTCP(t, sim.New(1, 1<<30))
	_, _, out, _ := setUp(g) // 4096 + 64 bytes
	toB, fromA := tcpPair(t)
	go serveTarget(fromA, Config{SessionID: "s1", Devices: []int{0}, MemoryQuota: 1024}, slog.Default(), nil)
	err := a.Migrate(toB, "b:1", false)
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("past its quota of 1024")) {
		t.Fatalf("migration past the target's quota: %v", err)
	}
	if got := dtoh(g, out, 4); len(got) != 4 {
		t.Fatal("the session stopped serving after a refused migration")
	}
}

// A cuBLAS handle made before a migration is the same handle after it, with its workspace: the
// target sets its stream and destroys it, giving the workspace back to the session's count.
func TestMigrateKeepsCublasHandles(t *testing.T) {
	g, a, _ := serveTCP(t, sim.New(1, 1<<30))
	_, _, _, stream := setUp(g)
	var br wire.BlasReply
	g.call(&wire.BlasCreate{}, &br)
	if br.Result != 0 {
		t.Fatalf("cublasCreate: %+v", br)
	}
	h := br.Handle
	toB, fromA := tcpPair(t)
	bReady := make(chan *Session, 1)
	go serveTarget(fromA, Config{SessionID: "s1", Devices: []int{0}}, slog.Default(), bReady)
	if err := a.Migrate(toB, "b:1", false); err != nil {
		t.Fatal(err)
	}
	b := <-bReady
	h0, p := g.next()
	var redirect wire.MigrateRedirect
	if h0.Type != wire.TypeMigrateRedirect || redirect.Decode(p) != nil {
		t.Fatalf("got %s, want MigrateRedirect", h0.Type)
	}
	g.secret = redirect.Secret
	guestB, workerB := tcpPair(t)
	g.resumeOn(b.resume, guestB, workerB)
	before := b.Stats.Snapshot().MemoryBytes
	g.call(&wire.BlasSetStream{Handle: h, Stream: uint64(stream)}, &br)
	if br.Result != 0 {
		t.Fatalf("cublasSetStream on the moved handle: %+v", br)
	}
	g.call(&wire.BlasDestroy{Handle: h}, &br)
	if br.Result != 0 {
		t.Fatalf("cublasDestroy on the moved handle: %+v", br)
	}
	if after := b.Stats.Snapshot().MemoryBytes; after >= before {
		t.Fatalf("the moved handle's workspace was not given back: %d then %d bytes", before, after)
	}
	g.call(&wire.BlasDestroy{Handle: h}, &br)
	if br.Result == 0 {
		t.Fatal("a destroyed handle destroyed again")
	}
}

// A session whose program asked the address of a global the driver placed (the simulated
// backend's driverglobal stands for one) is refused before anything is sent, naming the global,
// and serves on; a checkpoint of it is refused the same way, writing nothing.
func TestMigrateRefusesAHeldDriverPlacedGlobalEarly(t *testing.T) {
	g, a, _ := serveTCP(t, sim.New(1, 1<<30))
	_, _, out, _ := setUp(g)
	var hr wire.HandleReply
	g.call(&wire.ModuleLoad{Image: []byte("GPUSIM-MODULE 1\ndriverglobal table 64\n")}, &hr)
	var gr wire.ModuleGetGlobalReply
	g.call(&wire.ModuleGetGlobal{Module: hr.Handle, Name: "table"}, &gr)
	if gr.Result != 0 || gr.Bytes != 64 {
		t.Fatalf("global: %+v", gr)
	}
	toB, fromA := tcpPair(t)
	sent := make(chan int64, 1)
	go func() {
		n, _ := io.Copy(io.Discard, fromA)
		sent <- n
	}()
	err := a.Migrate(toB, "b:1", false)
	toB.Close()
	if !errors.Is(err, ErrNotMovable) || !strings.Contains(err.Error(), `global "table" of module`) {
		t.Fatalf("migration of a session holding a driver-placed global: %v", err)
	}
	if n := <-sent; n != 0 {
		t.Fatalf("%d bytes went to the target before the refusal", n)
	}
	if got := dtoh(g, out, 4); len(got) != 4 {
		t.Fatal("the session stopped serving after the refusal")
	}
	var image bytes.Buffer
	a.exec.Lock()
	err = a.Checkpoint(&image)
	a.exec.Unlock()
	if !errors.Is(err, backend.ErrNotSupported) || !strings.Contains(err.Error(), `global "table"`) || image.Len() != 0 {
		t.Fatalf("checkpoint: %v, %d bytes written", err, image.Len())
	}
}

// A target on another GPU does not take the memory offer: the session's memory is copied through
// the connection, and arrives whole.
func TestMigrateToAnotherGPUCopies(t *testing.T) {
	g, a, _ := serveTCP(t, sim.New(1, 1<<30))
	_, buf, _, _ := setUp(g)
	toB, fromA := tcpPair(t)
	bReady := make(chan *Session, 1)
	go serveTargetOn(fromA, Config{SessionID: "s1", Devices: []int{0}}, sim.UUID(5), slog.Default(), bReady)
	if err := a.Migrate(toB, "b:1", false); err != nil {
		t.Fatal(err)
	}
	b := <-bReady
	if p := a.Stats.Snapshot().Migration; p.Via != "stream" || p.HandedBytes != 0 || p.CopiedBytes < 4096 {
		t.Fatalf("to another GPU: %+v", p)
	}
	h, p := g.next()
	var redirect wire.MigrateRedirect
	if h.Type != wire.TypeMigrateRedirect || redirect.Decode(p) != nil {
		t.Fatalf("got %s, want MigrateRedirect", h.Type)
	}
	g.secret = redirect.Secret
	guestB, workerB := tcpPair(t)
	g.resumeOn(b.resume, guestB, workerB)
	if got := dtoh(g, buf, 4096); !bytes.Equal(got, bytes.Repeat([]byte{0xab}, 4096)) {
		t.Fatal("the copied allocation lost its contents")
	}
}

// An offer is taken only for the same GPUs and a well-formed socket; an image whose memory was
// handed over on a socket the reader did not take is refused.
func TestHandoverOfferChecks(t *testing.T) {
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: "@gpucloud-test-offer", Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	good := memoryOffer{Socket: "@gpucloud-test-offer", Secret: newSecret(), Devices: []string{sim.UUID(0)}}
	for name, o := range map[string]memoryOffer{
		"another GPU":    {Socket: good.Socket, Secret: good.Secret, Devices: []string{sim.UUID(1)}},
		"more devices":   {Socket: good.Socket, Secret: good.Secret, Devices: []string{sim.UUID(0), sim.UUID(1)}},
		"a short secret": {Socket: good.Socket, Secret: good.Secret[:8], Devices: good.Devices},
		"a path socket":  {Socket: "/tmp/x", Secret: good.Secret, Devices: good.Devices},
		"no such socket": {Socket: "@gpucloud-test-none", Secret: good.Secret, Devices: good.Devices},
	} {
		if takeOffer(&o, []string{sim.UUID(0)}) != nil {
			t.Errorf("%s: offer taken", name)
		}
	}
	if takeOffer(&good, []string{sim.UUID(0)}) == nil {
		t.Error("a good offer was not taken")
	}
	var b bytes.Buffer
	iw := newImageWriter(&b)
	iw.image(&SessionImage{Version: ImageVersion, SessionID: "s", Handed: true, Devices: []*DeviceImage{{Context: &backend.ContextImage{}}}})
	iw.end()
	if _, _, err := readMigration(&b, []string{sim.UUID(0)}); err == nil || !strings.Contains(err.Error(), "could not reach") {
		t.Fatalf("an image handed over on no socket: %v", err)
	}
}

// counterModule keeps its state in a global the driver places (count_global: ++counter), whose
// address the program never asks for, as a CUDA kernel keeping a count in a __device__ variable.
const counterModule = "GPUSIM-MODULE 1\nkernel count_global\ndriverglobal counter 4\n"

// countUp loads counterModule and runs count_global n times into a new 4-byte allocation, and
// returns the function and the allocation.
func countUp(g *streamGuest, n int) (fn backend.Handle, out uint64) {
	g.t.Helper()
	var hr wire.HandleReply
	g.call(&wire.ModuleLoad{Image: []byte(counterModule)}, &hr)
	g.call(&wire.ModuleGetFunction{Module: hr.Handle, Name: "count_global"}, &hr)
	fn = backend.Handle(hr.Handle)
	g.call(&wire.MemAlloc{Bytes: 4}, &hr)
	out = hr.Handle
	count(g, fn, out, n)
	return fn, out
}

// count runs count_global n times and checks nothing: the caller reads out.
func count(g *streamGuest, fn backend.Handle, out uint64, n int) {
	for range n {
		g.send(&wire.LaunchKernel{Function: uint64(fn), GridX: 1, GridY: 1, GridZ: 1, BlockX: 1, BlockY: 1, BlockZ: 1,
			Params: u64(out)}, wire.FlagNoReply)
	}
}

// A kernel's state in a driver-placed global survives a migration, by stream or handed over: the
// new load places the global elsewhere with its initial value, and the image's contents carry
// what the kernels left in it.
func TestMigrateCarriesDriverPlacedGlobals(t *testing.T) {
	for _, via := range []string{"stream", "handover"} {
		t.Run(via, func(t *testing.T) {
			g, a, _ := serveTCP(t, sim.New(1, 1<<30))
			fn, out := countUp(g, 3)
			toB, fromA := tcpPair(t)
			bReady := make(chan *Session, 1)
			go serveTarget(fromA, Config{SessionID: "s1", Tier: "shared", Devices: []int{0}}, slog.Default(), bReady)
			if err := a.Migrate(toB, "b:1", via == "stream"); err != nil {
				t.Fatal(err)
			}
			b := <-bReady
			h, p := g.next()
			var redirect wire.MigrateRedirect
			if h.Type != wire.TypeMigrateRedirect || redirect.Decode(p) != nil {
				t.Fatalf("got %s, want MigrateRedirect", h.Type)
			}
			g.secret = redirect.Secret
			guestB, workerB := tcpPair(t)
			g.resumeOn(b.resume, guestB, workerB)
			count(g, fn, out, 2)
			if got := binary.LittleEndian.Uint32(dtoh(g, out, 4)); got != 5 {
				t.Fatalf("after 3 counts, a move and 2 more the counter reads %d, want 5", got)
			}
		})
	}
}

// The same across a checkpoint and a restore into a fresh worker.
func TestCheckpointCarriesDriverPlacedGlobals(t *testing.T) {
	g, a, rcA := serveTCP(t, sim.New(1, 1<<30))
	fn, out := countUp(g, 4)
	var st wire.Status
	g.call(&wire.Synchronize{}, &st)
	var image bytes.Buffer
	a.exec.Lock()
	err := a.Checkpoint(&image)
	a.exec.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	rcA.Close()
	img, chunks, err := readImage(&image)
	if err != nil {
		t.Fatal(err)
	}
	secret, window := img.secretOrNew(false)
	rc := newRestoredResumeConn("s1", img.In, img.Out, secret, time.Duration(window)*time.Millisecond)
	b := NewSession(Config{SessionID: "s1", Tier: "shared", Devices: []int{0}}, sim.New(1, 1<<30), rc, slog.Default())
	b.resume = rc
	if err := b.Restore(img, chunks, nil); err != nil {
		t.Fatal(err)
	}
	go b.Serve(context.Background())
	guestB, workerB := tcpPair(t)
	g.resumeOn(rc, guestB, workerB)
	count(g, fn, out, 1)
	if got := binary.LittleEndian.Uint32(dtoh(g, out, 4)); got != 5 {
		t.Fatalf("after 4 counts, a checkpoint, a restore and 1 more the counter reads %d, want 5", got)
	}
}
