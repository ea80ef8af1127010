package sim

import (
	"bytes"
	"crypto/rand"
	"encoding/gob"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"sort"
	"sync"
	"time"

	"gpucloud/gpuserverd/backend"
)

// The simulated backend's NCCL (a test double of NVIDIA's): ranks in any number of worker
// processes find each other through the unique id, which names an abstract Unix socket that rank
// 0's process listens on (as NCCL's bootstrap root listens on a TCP port). Each rank's part of a
// collective runs on its stream, asynchronously like a GPU's: the stream's goroutine sends the
// rank's bytes to rank 0's hub and waits for its share of the result, which the hub computes once
// every rank has sent its part (reductions in rank order, rounding to the type after each step).

var _ backend.Collectives = (*Backend)(nil)

// simIDMagic starts a simulated unique id; 16 random bytes follow.
var simIDMagic = []byte("gpucloud-simnccl")

// simJoinTimeout bounds how long a rank waits for rank 0's hub to listen.
const simJoinTimeout = 30 * time.Second

func (b *Backend) NcclUniqueID() ([]byte, error) {
	id := make([]byte, 128)
	copy(id, simIDMagic)
	if _, err := rand.Read(id[len(simIDMagic) : len(simIDMagic)+16]); err != nil {
		return nil, fmt.Errorf("sim nccl: unique id: %w", err)
	}
	return id, nil
}

// GroupStart and GroupEnd need do nothing: every part already runs on its stream without
// waiting for the other ranks.
func (b *Backend) GroupStart() error { return nil }
func (b *Backend) GroupEnd() error   { return nil }

func hubAddress(id []byte) (*net.UnixAddr, error) {
	if len(id) != 128 || !bytes.Equal(id[:len(simIDMagic)], simIDMagic) {
		return nil, fmt.Errorf("sim nccl: not a simulated unique id: %w", backend.ErrInvalidValue)
	}
	return &net.UnixAddr{Net: "unix", Name: "@gpucloud-simnccl-" + hex.EncodeToString(id[len(simIDMagic):len(simIDMagic)+16])}, nil
}

type simComm struct {
	ctx          *Context
	addr         *net.UnixAddr
	rank, nranks int
	hub          *hub // rank 0's

	mu   sync.Mutex // one exchange with the hub at a time (held while the hub waits for the others)
	conn net.Conn
	enc  *gob.Encoder
	dec  *gob.Decoder

	state  sync.Mutex          // never held while waiting: the worker's thread asks while parts wait
	live   net.Conn            // conn, for Abort to close while a part waits
	err    error               // the first failed part
	ops    map[uint32]premulOp // ncclRedOpCreatePreMulSum's, by op number
	nextOp uint32
}

func (c *simComm) setErr(err error) {
	c.state.Lock()
	if c.err == nil {
		c.err = err
	}
	c.state.Unlock()
}

func (c *simComm) AsyncError() error {
	c.state.Lock()
	defer c.state.Unlock()
	return c.err
}

func (c *simComm) op(n uint32) (premulOp, bool) {
	c.state.Lock()
	defer c.state.Unlock()
	pm, ok := c.ops[n]
	return pm, ok
}

// premulOp is a pre-multiplied sum: the scalar's bytes, or (scalar nil) its device address.
type premulOp struct {
	datatype uint32
	scalar   []byte
	dev      uint64
}

func (b *Backend) CommInitRank(c backend.Context, id []byte, nranks, rank int) (backend.Comm, error) {
	ctx, ok := c.(*Context)
	if !ok {
		return nil, fmt.Errorf("sim nccl: not a simulated context: %w", backend.ErrInvalidContext)
	}
	addr, err := hubAddress(id)
	if err != nil {
		return nil, err
	}
	if nranks < 1 || rank < 0 || rank >= nranks {
		return nil, fmt.Errorf("sim nccl: rank %d of %d: %w", rank, nranks, backend.ErrInvalidValue)
	}
	sc := &simComm{ctx: ctx, addr: addr, rank: rank, nranks: nranks}
	if rank == 0 {
		ln, err := net.ListenUnix("unix", addr)
		if err != nil {
			return nil, fmt.Errorf("sim nccl: rank 0 of this id exists already: %w", err)
		}
		sc.hub = newHub(ln, nranks)
	}
	return sc, nil
}

// request is one rank's part as it travels to the hub (or, kind splitKind, its color in Peer and
// key in Count); reply is its share of the result (or its place in the split).
type request struct {
	Kind, Datatype, Op uint32
	Count              uint64
	Peer               int
	Data               []byte
}

type reply struct {
	Err             string
	Data            []byte
	NewRank, NewLen int    // split: the rank's place in its color's communicator
	NewID           []byte // split: that communicator's unique id
}

// splitKind marks a split among the collective kinds the hub pairs.
const splitKind = 100

func (c *simComm) RedOpCreatePreMulSum(datatype uint32, scalar []byte, dev uint64) (uint32, error) {
	es, ok := elemSizes[datatype]
	if !ok {
		return 0, fmt.Errorf("sim nccl: datatype %d not simulated: %w", datatype, backend.ErrNotSupported)
	}
	op := premulOp{datatype: datatype, dev: dev}
	if scalar != nil {
		if len(scalar) < es {
			return 0, fmt.Errorf("sim nccl: scalar of %d bytes for a %d-byte type: %w", len(scalar), es, backend.ErrInvalidValue)
		}
		op.scalar = append([]byte(nil), scalar[:es]...)
	} else if _, err := c.ctx.mem.view(dev, uint64(es)); err != nil {
		return 0, fmt.Errorf("sim nccl: scalar's device address: %w", err)
	}
	c.state.Lock()
	defer c.state.Unlock()
	if c.ops == nil {
		c.ops, c.nextOp = map[uint32]premulOp{}, backend.NcclBuiltinOps
	}
	n := c.nextOp
	c.nextOp++
	c.ops[n] = op
	return n, nil
}

func (c *simComm) RedOpDestroy(op uint32) error {
	c.state.Lock()
	defer c.state.Unlock()
	if _, ok := c.ops[op]; !ok {
		return fmt.Errorf("sim nccl: no reduction op %d: %w", op, backend.ErrInvalidValue)
	}
	delete(c.ops, op)
	return nil
}

// Split waits for the rank's queued parts, then asks the hub for its place: a split is a
// collective of every rank of the communicator, answered synchronously (ranks of one process
// driving several must split from their own threads; the simulation does not group splits).
func (c *simComm) Split(color, key int) (backend.Comm, int, int, error) {
	if err := c.ctx.Synchronize(); err != nil {
		return nil, 0, 0, err
	}
	if err := c.AsyncError(); err != nil {
		return nil, 0, 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.join(); err != nil {
		return nil, 0, 0, err
	}
	if color < 0 {
		color = backend.NcclSplitNoColor
	}
	var rep reply
	c.conn.SetDeadline(time.Now().Add(simJoinTimeout))
	defer c.conn.SetDeadline(time.Time{})
	if err := c.enc.Encode(&request{Kind: splitKind, Peer: color, Count: uint64(int64(key))}); err != nil {
		return nil, 0, 0, fmt.Errorf("sim nccl: split: %w", err)
	}
	if err := c.dec.Decode(&rep); err != nil {
		return nil, 0, 0, fmt.Errorf("sim nccl: split: the other ranks did not split with rank %d: %w", c.rank, err)
	}
	if rep.Err != "" {
		return nil, 0, 0, errors.New(rep.Err)
	}
	if rep.NewID == nil {
		return nil, 0, 0, nil
	}
	b := &Backend{}
	nc, err := b.CommInitRank(c.ctx, rep.NewID, rep.NewLen, rep.NewRank)
	if err != nil {
		return nil, 0, 0, err
	}
	return nc, rep.NewRank, rep.NewLen, nil
}

func (c *simComm) Post(op backend.CollectiveOp) error {
	es, ok := elemSizes[op.Datatype]
	if !ok {
		return fmt.Errorf("sim nccl: datatype %d not simulated: %w", op.Datatype, backend.ErrNotSupported)
	}
	if op.Op > opAvg {
		pm, ok := c.op(op.Op)
		if !ok || pm.datatype != op.Datatype {
			return fmt.Errorf("sim nccl: reduction op %d (not one of this communicator's for type %d): %w", op.Op, op.Datatype, backend.ErrInvalidValue)
		}
	}
	n := op.Count * uint64(es)
	if n*uint64(c.nranks) > 1<<30 {
		return fmt.Errorf("sim nccl: %d bytes a rank is more than the simulation moves: %w", n, backend.ErrInvalidValue)
	}
	sendBytes, recvBytes := n, n
	switch op.Kind {
	case backend.CollAllGather:
		recvBytes = n * uint64(c.nranks)
	case backend.CollReduceScatter:
		sendBytes = n * uint64(c.nranks)
	case backend.CollBroadcast:
		if op.Peer != c.rank {
			sendBytes = 0
		}
	case backend.CollReduce:
		if op.Peer != c.rank {
			recvBytes = 0
		}
	case backend.CollSend:
		recvBytes = 0
	case backend.CollRecv:
		sendBytes = 0
	}
	// Check the buffers now, so a bad pointer is the caller's error rather than a later one.
	if sendBytes > 0 {
		if _, err := c.ctx.mem.view(op.Send, sendBytes); err != nil {
			return fmt.Errorf("sim nccl: send buffer: %w", err)
		}
	}
	if recvBytes > 0 {
		if _, err := c.ctx.mem.view(op.Recv, recvBytes); err != nil {
			return fmt.Errorf("sim nccl: receive buffer: %w", err)
		}
	}
	return c.ctx.runKind(uncapturable, op.Stream, true, func() error {
		if err := c.exchange(op, sendBytes, recvBytes); err != nil {
			c.setErr(err)
		}
		return nil // the communicator's error (AsyncError), not the context's
	})
}

// exchange runs on the rank's stream: its bytes to the hub, its share back into recv.
func (c *simComm) exchange(op backend.CollectiveOp, sendBytes, recvBytes uint64) error {
	if err := c.AsyncError(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.join(); err != nil {
		return err
	}
	req := request{Kind: op.Kind, Datatype: op.Datatype, Op: op.Op, Count: op.Count, Peer: op.Peer}
	if sendBytes > 0 {
		src, err := c.ctx.mem.view(op.Send, sendBytes)
		if err != nil {
			return err
		}
		req.Data = append([]byte(nil), src...)
	}
	if pm, ok := c.op(op.Op); ok { // a pre-multiplied sum: scale here, sum at the hub
		s := pm.scalar
		if s == nil {
			v, err := c.ctx.mem.view(pm.dev, uint64(elemSizes[pm.datatype]))
			if err != nil {
				return fmt.Errorf("sim nccl: pre-multiplied sum's scalar: %w", err)
			}
			s = v
		}
		scale(req.Data, s, op.Datatype)
		req.Op = opSum
	}
	var rep reply
	if err := c.enc.Encode(&req); err != nil {
		return fmt.Errorf("sim nccl: rank %d to the hub: %w", c.rank, err)
	}
	if err := c.dec.Decode(&rep); err != nil {
		return fmt.Errorf("sim nccl: rank %d from the hub: %w", c.rank, err)
	}
	if rep.Err != "" {
		return errors.New(rep.Err)
	}
	if recvBytes > 0 {
		dst, err := c.ctx.mem.view(op.Recv, recvBytes)
		if err != nil {
			return err
		}
		if uint64(len(rep.Data)) != recvBytes {
			return fmt.Errorf("sim nccl: the hub sent %d bytes, want %d", len(rep.Data), recvBytes)
		}
		copy(dst, rep.Data)
	}
	return nil
}

// join connects to the hub once, waiting for rank 0's process to listen.
func (c *simComm) join() error {
	if c.conn != nil {
		return nil
	}
	deadline := time.Now().Add(simJoinTimeout)
	for {
		conn, err := net.DialUnix("unix", nil, c.addr)
		if err == nil {
			c.state.Lock()
			freed := c.err != nil
			c.live = conn
			c.state.Unlock()
			if freed {
				conn.Close()
				return errors.New("sim nccl: communicator freed")
			}
			c.conn, c.enc, c.dec = conn, gob.NewEncoder(conn), gob.NewDecoder(conn)
			return c.enc.Encode(c.rank)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sim nccl: rank %d found no rank 0: %w", c.rank, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Finalize waits for the rank's queued parts.
func (c *simComm) Finalize() error {
	if err := c.ctx.Synchronize(); err != nil {
		return err
	}
	return c.AsyncError()
}

func (c *simComm) Close() error { return c.Abort() }

// Abort frees the communicator without waiting: closing the connection ends a part that waits
// for the hub, and closing rank 0's hub ends every rank's.
func (c *simComm) Abort() error {
	c.setErr(errors.New("sim nccl: communicator freed"))
	if c.hub != nil {
		c.hub.close()
	}
	c.state.Lock()
	conn := c.live
	c.live = nil
	c.state.Unlock()
	if conn != nil {
		conn.Close()
	}
	return nil
}

// hub is rank 0's side: it pairs every rank's parts and answers each.
type hub struct {
	ln     *net.UnixListener
	nranks int

	mu      sync.Mutex
	cond    *sync.Cond
	pending [][]*part           // per rank, collective parts not yet run
	mail    map[[2]int][][]byte // (from, to) -> sends not yet received
	closed  bool
}

type part struct {
	req  request
	done chan reply
}

func newHub(ln *net.UnixListener, nranks int) *hub {
	h := &hub{ln: ln, nranks: nranks, pending: make([][]*part, nranks), mail: map[[2]int][][]byte{}}
	h.cond = sync.NewCond(&h.mu)
	go h.accept()
	return h
}

// close stops taking ranks and fails the parts that wait for a rank that will not come. The
// connections stay: a rank whose last part was answered may still be reading its answer, and a
// receive may still take what was sent before (the ranks close them when they free theirs).
func (h *hub) close() {
	h.mu.Lock()
	h.closed = true
	for r, ps := range h.pending {
		for _, p := range ps {
			p.done <- reply{Err: "sim nccl: communicator freed"}
		}
		h.pending[r] = nil
	}
	h.cond.Broadcast()
	h.mu.Unlock()
	h.ln.Close()
}

func (h *hub) accept() {
	for {
		conn, err := h.ln.Accept()
		if err != nil {
			return
		}
		go h.serve(conn)
	}
}

func (h *hub) serve(conn net.Conn) {
	defer conn.Close()
	enc, dec := gob.NewEncoder(conn), gob.NewDecoder(conn)
	var rank int
	if err := dec.Decode(&rank); err != nil || rank < 0 || rank >= h.nranks {
		return
	}
	for {
		var req request
		if err := dec.Decode(&req); err != nil {
			return
		}
		if err := enc.Encode(h.handle(rank, req)); err != nil {
			return
		}
	}
}

func (h *hub) handle(rank int, req request) reply {
	switch req.Kind {
	case backend.CollSend:
		h.mu.Lock()
		k := [2]int{rank, req.Peer}
		h.mail[k] = append(h.mail[k], req.Data)
		h.cond.Broadcast()
		h.mu.Unlock()
		return reply{}
	case backend.CollRecv:
		h.mu.Lock()
		defer h.mu.Unlock()
		k := [2]int{req.Peer, rank}
		for len(h.mail[k]) == 0 && !h.closed {
			h.cond.Wait()
		}
		if len(h.mail[k]) == 0 { // closed, and nothing was sent before
			return reply{Err: "sim nccl: communicator freed"}
		}
		d := h.mail[k][0]
		h.mail[k] = h.mail[k][1:]
		es := uint64(elemSizes[req.Datatype])
		if uint64(len(d)) != req.Count*es {
			return reply{Err: fmt.Sprintf("sim nccl: rank %d sent %d bytes, rank %d receives %d", req.Peer, len(d), rank, req.Count*es)}
		}
		return reply{Data: d}
	}
	p := &part{req: req, done: make(chan reply, 1)}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return reply{Err: "sim nccl: communicator freed"}
	}
	h.pending[rank] = append(h.pending[rank], p)
	h.runReady()
	h.mu.Unlock()
	return <-p.done
}

// runReady runs every collective whose parts all ranks have sent. h.mu is held.
func (h *hub) runReady() {
	for {
		heads := make([]*part, h.nranks)
		for r := range heads {
			if len(h.pending[r]) == 0 {
				return
			}
			heads[r] = h.pending[r][0]
		}
		for r := range heads {
			h.pending[r] = h.pending[r][1:]
		}
		out := collective(heads)
		for r, p := range heads {
			p.done <- out[r]
		}
	}
}

// collective computes every rank's share of one collective.
func collective(heads []*part) []reply {
	out := make([]reply, len(heads))
	h0 := heads[0].req
	for r, p := range heads {
		q := p.req
		if q.Kind != h0.Kind || (q.Kind != splitKind && (q.Count != h0.Count || q.Datatype != h0.Datatype || q.Op != h0.Op || q.Peer != h0.Peer)) {
			msg := fmt.Sprintf("sim nccl: ranks disagree: rank 0 posted %s of %d (type %d, op %d, root %d), rank %d %s of %d (type %d, op %d, root %d)",
				kindName(h0.Kind), h0.Count, h0.Datatype, h0.Op, h0.Peer, r, kindName(q.Kind), q.Count, q.Datatype, q.Op, q.Peer)
			for i := range out {
				out[i] = reply{Err: msg}
			}
			return out
		}
	}
	if h0.Kind == splitKind {
		return split(heads)
	}
	in := make([][]byte, len(heads))
	for r, p := range heads {
		in[r] = p.req.Data
	}
	n := int(h0.Count) * elemSizes[h0.Datatype]
	switch h0.Kind {
	case backend.CollAllReduce:
		red := reduce(in, h0.Datatype, h0.Op)
		for r := range out {
			out[r].Data = red
		}
	case backend.CollReduce:
		out[h0.Peer].Data = reduce(in, h0.Datatype, h0.Op)
	case backend.CollBroadcast:
		for r := range out {
			out[r].Data = in[h0.Peer]
		}
	case backend.CollAllGather:
		all := make([]byte, 0, n*len(in))
		for _, b := range in {
			all = append(all, b...)
		}
		for r := range out {
			out[r].Data = all
		}
	case backend.CollReduceScatter:
		red := reduce(in, h0.Datatype, h0.Op)
		for r := range out {
			out[r].Data = red[r*n : (r+1)*n]
		}
	}
	return out
}

func kindName(k uint32) string {
	if k == splitKind {
		return "split"
	}
	return backend.CollectiveNames[k]
}

// split places every rank: the ranks of one color, ordered by key then by rank, make a new
// communicator with a new unique id; a rank of no color gets none.
func split(heads []*part) []reply {
	out := make([]reply, len(heads))
	byColor := map[int][]int{}
	for r, p := range heads {
		if c := p.req.Peer; c >= 0 {
			byColor[c] = append(byColor[c], r)
		}
	}
	for _, ranks := range byColor {
		sort.SliceStable(ranks, func(i, j int) bool {
			return int64(heads[ranks[i]].req.Count) < int64(heads[ranks[j]].req.Count)
		})
		id, err := (&Backend{}).NcclUniqueID()
		for i, r := range ranks {
			if err != nil {
				out[r].Err = err.Error()
				continue
			}
			out[r] = reply{NewRank: i, NewLen: len(ranks), NewID: id}
		}
	}
	return out
}
