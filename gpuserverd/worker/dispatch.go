package worker

import (
	"encoding/hex"
	"fmt"
	"io"
	"strings"
	"time"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/wire"
)

// serveOne reads one request and answers it (unless sent without waiting for a reply).
func (s *Session) serveOne() error {
	var hb [wire.HeaderSize]byte
	s.conn.SetReadDeadline(time.Time{}) // idle sessions may wait as long as they like
	if _, err := io.ReadFull(s.r, hb[:]); err != nil {
		return err
	}
	h, err := wire.ParseHeader(hb[:])
	if err != nil {
		return err
	}
	s.conn.SetReadDeadline(time.Now().Add(frameTimeout))
	// Host-to-device data lands straight in a pinned staging slot.
	var sl *slot
	buf := s.buf
	if h.Type == wire.TypeMemcpyHtoD {
		if d, err := s.dev(); err == nil && int(h.Length) <= len(d.ring.slots[0].buf) {
			if sl, err = d.ring.take(); err != nil {
				s.deferErr(err) // the copy then goes unstaged, synchronously
			} else {
				buf = sl.buf
			}
		}
	}
	if cap(buf) < int(h.Length) {
		buf = make([]byte, h.Length)
		if h.Length <= 1<<20 {
			s.buf = buf
		}
	}
	buf = buf[:h.Length]
	if _, err := io.ReadFull(s.r, buf); err != nil {
		return fmt.Errorf("reading %s payload: %w", h.Type, err)
	}
	m, err := wire.Decode(h.Type, buf)
	if err != nil {
		return err
	}
	noReply := h.Flags&wire.FlagNoReply != 0
	if noReply && (h.Type == wire.TypeMemcpyDtoH || h.Type == wire.TypeShmOpen || h.Type == wire.TypeMemcpyHtoDStriped || h.Type == wire.TypeMemcpyDtoHStriped) {
		return fmt.Errorf("%w: %s cannot go without a reply", wire.ErrDecode, h.Type)
	}
	if s.dirty != nil {
		s.dirty.note(s, m)
	}
	answer, err := s.handle(m, h, sl)
	if err != nil {
		return err
	}
	if answer == nil {
		return nil // already answered (streamed replies)
	}
	if noReply {
		if r := resultOf(answer); r != 0 {
			s.deferErr(fmt.Errorf("asynchronous %s: %s: %w", h.Type, messageOf(answer), backend.Result(r)))
		}
		return nil
	}
	return s.reply(h.Request, answer, 0)
}

// resultOf extracts the result field every reply carries.
func resultOf(m wire.Message) int32 {
	switch r := m.(type) {
	case *wire.Status:
		return r.Result
	case *wire.HandleReply:
		return r.Result
	case *wire.ValueReply:
		return r.Result
	case *wire.BlasReply:
		return r.Result
	case *wire.ApiCallReply:
		return r.Result
	case *wire.DnnReply:
		return r.Result
	case *wire.SolverReply:
		return r.Result
	case *wire.SparseReply:
		return r.Result
	case *wire.FftReply:
		return r.Result
	case *wire.RandReply:
		return r.Result
	case *wire.JpegReply:
		return r.Result
	case *wire.NppReply:
		return r.Result
	}
	return 0
}

// messageOf extracts the server's words on a failure from the replies that carry them.
func messageOf(m wire.Message) string {
	switch r := m.(type) {
	case *wire.Status:
		return r.Message
	case *wire.BlasReply:
		return r.Message
	case *wire.DnnReply:
		return r.Message
	case *wire.SolverReply:
		return r.Message
	case *wire.SparseReply:
		return r.Message
	case *wire.FftReply:
		return r.Message
	case *wire.RandReply:
		return r.Message
	case *wire.JpegReply:
		return r.Message
	case *wire.NppReply:
		return r.Message
	}
	return ""
}

func (s *Session) handle(m wire.Message, h wire.Header, sl *slot) (wire.Message, error) {
	s.resolvePerThread(m)
	if answer, ok := s.ipcCall(m); ok { // IPC within the instance (ipc.go)
		return answer, nil
	}
	if answer, ok := s.family(m); ok { // the hand-written driver-API families (families.go)
		return answer, nil
	}
	switch m := m.(type) {
	case *wire.Hello:
		return nil, fmt.Errorf("%w: Hello after the handshake", wire.ErrDecode)
	case *wire.DriverVersion:
		v, err := s.b.DriverVersion()
		return &wire.ValueReply{Result: int32(backend.ResultOf(err)), Value: v}, nil
	case *wire.DeviceInfo:
		return s.deviceInfo(m), nil
	case *wire.DeviceAttribute:
		if int(m.Ordinal) >= len(s.cfg.Devices) {
			return &wire.ValueReply{Result: int32(backend.ErrInvalidDevice)}, nil
		}
		v, err := s.b.DeviceAttribute(s.cfg.Devices[m.Ordinal], m.Attribute)
		return &wire.ValueReply{Result: int32(backend.ResultOf(err)), Value: v}, nil
	case *wire.NvmlSessionPid:
		s.Stats.setGuestPID(m.Pid)
		return status(nil), nil
	case *wire.LanesOpen:
		r := s.lanes.open(m.Lanes)
		if r.Result == 0 {
			// The server routes lanes by this key's name, among the sessions of an instance:
			// tell it before the guest, which opens its lanes as soon as it has the reply.
			s.Stats.setLaneKey(r.Key)
			s.tellServer()
		}
		return r, nil
	case *wire.ResumeOpen:
		if s.resume == nil || s.shm != nil { // an arena's rings are not the socket's stream
			return &wire.ResumeOpenReply{Result: int32(backend.ErrNotSupported)}, nil
		}
		reply := s.resume.open(m.WindowMs)
		if reply.Result == 0 {
			s.Stats.setResumeKey(reply.Secret)
			s.tellServer() // the server routes this guest's resumes by it from now on
		}
		return reply, nil
	case *wire.ShmOpen:
		return s.shmOpen(m, h.Request)
	case *wire.ShmDevicePointer:
		return s.shmDevicePointer(), nil
	case *wire.MemcpyHtoDStriped:
		return s.htodStriped(m)
	case *wire.MemcpyDtoHStriped:
		return s.dtohStriped(m)
	case *wire.SetDevice:
		if int(m.Ordinal) >= len(s.cfg.Devices) {
			return status(fmt.Errorf("device %d of %d granted: %w", m.Ordinal, len(s.cfg.Devices), backend.ErrInvalidDevice)), nil
		}
		s.current = int(m.Ordinal)
		return status(nil), nil
	case *wire.PeerAccess:
		return status(s.peerAccess(m)), nil
	case *wire.MemcpyPeer:
		return s.syncStatus(s.memcpyPeer(m), m.Async == 0), nil
	case *wire.StreamWaitPeerEvent:
		return status(s.waitPeerEvent(m)), nil
	case *wire.NcclGetUniqueId, *wire.NcclCommInit, *wire.NcclCommDestroy, *wire.NcclCollective, *wire.NcclGroup,
		*wire.NcclCommQuery, *wire.NcclRedOp, *wire.NcclCommSplit:
		return s.nccl(m, h.Flags&wire.FlagNoReply != 0), nil
	}
	d, err := s.dev()
	if err != nil {
		if _, ok := m.(*wire.MemcpyDtoH); ok {
			return &wire.MemcpyDtoHData{Result: int32(backend.ResultOf(err))}, nil
		}
		if isBlas(m) {
			return blasReply(0, err), nil
		}
		if _, ok := m.(*wire.ApiCall); ok {
			return apiReply(nil, 0, err), nil
		}
		if isDnn(m) {
			return dnnReply(0, err), nil
		}
		if isLt(m) {
			return ltFailed(m, err), nil
		}
		if lib, _, _, _, ok := libRequest(m); ok {
			return libReply(lib, nil, err), nil
		}
		switch m.(type) {
		case *wire.RandTable:
			return libReply(backend.LibRand, nil, err), nil
		case *wire.ModuleGetGlobalManaged:
			return &wire.ModuleGlobalReply{Result: int32(backend.ResultOf(err))}, nil
		}
		return status(err), nil
	}
	c := d.ctx
	switch m := m.(type) {
	case *wire.Synchronize:
		return status(s.takePending(c.Synchronize())), nil
	case *wire.CtxSetLimit:
		return status(c.SetLimit(m.Limit, m.Value)), nil
	case *wire.CtxGetLimit:
		v, err := c.Limit(m.Limit)
		return &wire.LimitReply{Result: int32(backend.ResultOf(err)), Value: v}, nil
	case *wire.CtxSetCacheConfig:
		return status(c.SetCacheConfig(m.Config)), nil
	case *wire.CtxGetCacheConfig:
		v, err := c.CacheConfig()
		return &wire.ValueReply{Result: int32(backend.ResultOf(err)), Value: v}, nil
	case *wire.MemAlloc:
		return s.memAlloc(d, m.Bytes), nil
	case *wire.MemFree:
		if d.blas.isWorkspace(m.Ptr) {
			return status(fmt.Errorf("%#x is a cuBLAS handle's workspace: %w", m.Ptr, backend.ErrInvalidValue)), nil
		}
		return status(s.free(d, m.Ptr)), nil
	case *wire.MemGetInfo:
		free, total, err := c.MemGetInfo()
		if q := s.cfg.MemoryQuota; q > 0 {
			total, free = min(total, q), min(free, q-min(q, s.quotaUsed(d)))
		}
		return &wire.MemGetInfoReply{Result: int32(backend.ResultOf(err)), Free: free, Total: total}, nil
	case *wire.MemcpyHtoD:
		return s.memcpyHtoD(d, m, h, sl), nil
	case *wire.MemcpyDtoH:
		return nil, s.memcpyDtoH(d, m, h.Request)
	case *wire.MemcpyHtoDShm:
		return s.htodShm(d, m, h), nil
	case *wire.MemcpyDtoHShm:
		return s.dtohShm(d, m, h), nil
	case *wire.MemcpyDtoD:
		if err, ok := s.crossDeviceDtoD(d, m); ok {
			return s.syncStatus(err, m.Async == 0), nil
		}
		err := c.MemcpyDtoD(m.Dst, m.Src, m.Bytes, backend.Handle(m.Stream), m.Async != 0)
		return s.syncStatus(err, m.Async == 0), nil
	case *wire.Memset:
		err := c.Memset(m.Dst, m.Value, int(m.ElemSize), m.Count, backend.Handle(m.Stream), m.Async != 0)
		return s.syncStatus(err, m.Async == 0), nil
	case *wire.ModuleLoad:
		hd, err := c.ModuleLoadData(m.Image)
		return &wire.HandleReply{Result: int32(backend.ResultOf(err)), Handle: uint64(hd)}, nil
	case *wire.ModuleUnload:
		return status(c.ModuleUnload(backend.Handle(m.Module))), nil
	case *wire.ModuleGetFunction:
		hd, err := c.ModuleGetFunction(backend.Handle(m.Module), m.Name)
		return &wire.HandleReply{Result: int32(backend.ResultOf(err)), Handle: uint64(hd)}, nil
	case *wire.ModuleGetGlobal:
		p, n, err := c.ModuleGetGlobal(backend.Handle(m.Module), m.Name)
		return &wire.ModuleGetGlobalReply{Result: int32(backend.ResultOf(err)), Ptr: p, Bytes: n}, nil
	case *wire.FuncParamLayout:
		ps, err := c.ParamLayout(backend.Handle(m.Function))
		r := &wire.FuncParamLayoutReply{Result: int32(backend.ResultOf(err))}
		for _, p := range ps {
			r.Offsets, r.Sizes = append(r.Offsets, p.Offset), append(r.Sizes, p.Size)
		}
		return r, nil
	case *wire.FuncGetAttribute:
		v, err := c.FuncGetAttribute(backend.Handle(m.Function), m.Attribute)
		return &wire.ValueReply{Result: int32(backend.ResultOf(err)), Value: v}, nil
	case *wire.FuncSetAttribute:
		return status(c.FuncSetAttribute(backend.Handle(m.Function), m.Attribute, m.Value)), nil
	case *wire.OccupancyMaxActiveBlocks:
		v, err := c.OccupancyMaxActiveBlocks(backend.Handle(m.Function), m.BlockSize, m.DynamicShared, m.Flags)
		return &wire.ValueReply{Result: int32(backend.ResultOf(err)), Value: v}, nil
	case *wire.LaunchKernel:
		return status(c.LaunchKernel(backend.LaunchConfig{
			Function: backend.Handle(m.Function), Grid: [3]uint32{m.GridX, m.GridY, m.GridZ},
			Block: [3]uint32{m.BlockX, m.BlockY, m.BlockZ}, SharedMemBytes: m.SharedMem,
			Stream: backend.Handle(m.Stream), Params: m.Params,
		})), nil
	case *wire.StreamCreate:
		hd, err := c.StreamCreate(m.Flags)
		return &wire.HandleReply{Result: int32(backend.ResultOf(err)), Handle: uint64(hd)}, nil
	case *wire.StreamDestroy:
		return status(c.StreamDestroy(backend.Handle(m.Stream))), nil
	case *wire.StreamSynchronize:
		return status(s.takePending(c.StreamSynchronize(backend.Handle(m.Stream)))), nil
	case *wire.StreamQuery:
		return status(s.takePending(c.StreamQuery(backend.Handle(m.Stream)))), nil
	case *wire.StreamWaitEvent:
		return status(c.StreamWaitEvent(backend.Handle(m.Stream), backend.Handle(m.Event))), nil
	case *wire.EventCreate:
		hd, err := c.EventCreate(m.Flags)
		return &wire.HandleReply{Result: int32(backend.ResultOf(err)), Handle: uint64(hd)}, nil
	case *wire.EventDestroy:
		return status(c.EventDestroy(backend.Handle(m.Event))), nil
	case *wire.EventRecord:
		return status(c.EventRecord(backend.Handle(m.Event), backend.Handle(m.Stream))), nil
	case *wire.EventSynchronize:
		return status(s.takePending(c.EventSynchronize(backend.Handle(m.Event)))), nil
	case *wire.EventQuery:
		return status(s.takePending(c.EventQuery(backend.Handle(m.Event)))), nil
	case *wire.BlasCreate, *wire.BlasDestroy, *wire.BlasSetStream, *wire.BlasSetMathMode,
		*wire.BlasSetWorkspace, *wire.BlasGemm, *wire.BlasTrsm, *wire.BlasGetrfBatched, *wire.BlasGetrsBatched:
		return s.blas(d, m), nil
	case *wire.ApiCall:
		return s.apiCall(c, m), nil
	case *wire.DnnCreate, *wire.DnnDestroy, *wire.DnnSetStream, *wire.DnnDescCreate, *wire.DnnDescDestroy,
		*wire.DnnSetAttribute, *wire.DnnGetAttribute, *wire.DnnFinalize, *wire.DnnExecute, *wire.DnnLegacy,
		*wire.DnnExecutePack:
		return s.dnn(d, m), nil
	case *wire.LtCreate, *wire.LtHeuristic, *wire.LtMatmul, *wire.LtGetAttribute:
		return s.lt(d, m), nil
	case *wire.SparseCall, *wire.FftCall, *wire.RandCall, *wire.SolverCall, *wire.JpegCall, *wire.NppCall:
		return s.libCall(d, m), nil
	case *wire.RandTable:
		return s.randTable(d, m), nil
	case *wire.ModuleGetGlobalManaged:
		return moduleGlobalManaged(c, m), nil
	case *wire.StreamSetAccessPolicy:
		return status(streamAccessPolicy(c, m)), nil
	case *wire.EventElapsedTime:
		ms, err := c.EventElapsedTime(backend.Handle(m.Start), backend.Handle(m.End))
		return &wire.ElapsedReply{Result: int32(backend.ResultOf(err)), Milliseconds: ms}, nil
	}
	return nil, fmt.Errorf("%w: %s is not a request", wire.ErrDecode, h.Type)
}

// syncStatus answers a copy or memset: a synchronous one also reports earlier async errors.
func (s *Session) syncStatus(err error, sync bool) *wire.Status {
	if sync {
		err = s.takePending(err)
	}
	return status(err)
}

func (s *Session) deviceInfo(m *wire.DeviceInfo) wire.Message {
	if int(m.Ordinal) >= len(s.cfg.Devices) {
		return &wire.DeviceInfoReply{Result: int32(backend.ErrInvalidDevice)}
	}
	devs, err := s.b.Devices()
	if err != nil {
		return &wire.DeviceInfoReply{Result: int32(backend.ResultOf(err))}
	}
	ord := s.cfg.Devices[m.Ordinal]
	if ord >= len(devs) {
		return &wire.DeviceInfoReply{Result: int32(backend.ErrInvalidDevice)}
	}
	d := devs[ord]
	total := d.TotalMemory
	if q := s.cfg.MemoryQuota; q > 0 {
		total = min(total, q) // a shared-tier session sees its share as the device's memory
	}
	uuid, _ := hex.DecodeString(strings.ReplaceAll(strings.TrimPrefix(d.UUID, "GPU-"), "-", ""))
	if len(uuid) != 16 {
		uuid = make([]byte, 16)
	}
	return &wire.DeviceInfoReply{Name: d.Name, UUID: uuid, TotalMemory: total,
		Major: int32(d.Major), Minor: int32(d.Minor), PCIBusID: d.PCIBusID}
}

// memAlloc enforces the session's memory quota before the device sees the request.
func (s *Session) memAlloc(d *device, bytes uint64) wire.Message {
	p, err := s.alloc(d, bytes)
	return &wire.HandleReply{Result: int32(backend.ResultOf(err)), Handle: p}
}

// alloc allocates device memory charged to the quota: the instance's across its sessions when
// the server keeps a ledger (memledger.go), else the session's.
func (s *Session) alloc(d *device, bytes uint64) (uint64, error) {
	if err := s.charge(d, bytes); err != nil {
		return 0, err
	}
	p, err := d.ctx.MemAlloc(bytes)
	if err != nil {
		s.uncharge(d, bytes)
		return 0, err
	}
	d.allocs[p] = bytes
	return p, nil
}

// charge counts bytes of device memory against the quota, refusing them past it: the session's
// own count, and the instance's across its sessions when the server keeps a ledger
// (memledger.go). Every allocation kind (plain, VMM, pools, arrays) goes through it.
func (s *Session) charge(d *device, bytes uint64) error {
	q := s.cfg.MemoryQuota
	if q > 0 && (bytes > q || d.used > q-bytes) {
		return fmt.Errorf("%d bytes past the session's quota of %d: %w", bytes, q, backend.ErrOutOfMemory)
	}
	if q > 0 && s.ledger != nil && bytes > 0 && bytes < 1<<62 {
		ok, used, err := s.ledger(d.index, int64(bytes))
		if err != nil {
			return fmt.Errorf("%w (%w)", err, backend.ErrOutOfMemory)
		}
		if !ok {
			return fmt.Errorf("%d bytes past the instance's quota of %d on this GPU (its sessions hold %d): %w",
				bytes, q, used, backend.ErrOutOfMemory)
		}
	}
	d.used += bytes
	s.Stats.memory(d.ordinal, int64(bytes))
	return nil
}

// uncharge gives back what charge counted, to the session and to the instance's ledger.
func (s *Session) uncharge(d *device, bytes uint64) {
	d.used -= bytes
	s.Stats.memory(d.ordinal, -int64(bytes))
	if s.cfg.MemoryQuota > 0 && bytes < 1<<62 {
		s.giveBack(d, bytes)
	}
}

// free releases an allocation made by alloc.
func (s *Session) free(d *device, p uint64) error {
	err := d.ctx.MemFree(p)
	if err == nil {
		s.uncharge(d, d.allocs[p])
		delete(d.allocs, p)
	}
	return err
}

// giveBack returns n bytes to the instance's ledger.
func (s *Session) giveBack(d *device, n uint64) {
	if s.ledger == nil || n == 0 {
		return
	}
	if _, _, err := s.ledger(d.index, -int64(n)); err != nil {
		s.log.Warn("giving memory back to the instance's quota", "bytes", n, "err", err)
	}
}

// quotaUsed is what counts against the quota on d: the instance's bytes when there is a ledger.
func (s *Session) quotaUsed(d *device) uint64 {
	if s.ledger != nil {
		if _, used, err := s.ledger(d.index, 0); err == nil {
			return max(used, d.used)
		}
	}
	return d.used
}

func (s *Session) memcpyHtoD(d *device, m *wire.MemcpyHtoD, h wire.Header, sl *slot) wire.Message {
	stream, async := backend.Handle(m.Stream), m.Async != 0
	s.Stats.moved(len(m.Data))
	if sl == nil { // not staged: copy synchronously from the frame buffer we reuse
		return s.syncStatus(d.ctx.MemcpyHtoD(m.Dst, m.Data, stream, false), true)
	}
	if err := d.ctx.MemcpyHtoD(m.Dst, m.Data, stream, true); err != nil {
		return status(err)
	}
	if err := d.ring.busy(sl, stream); err != nil {
		return status(err)
	}
	if h.Flags&wire.FlagNoReply != 0 || async {
		return status(nil)
	}
	return status(s.takePending(d.ctx.StreamSynchronize(stream)))
}

// memcpyDtoH streams the data back in chunks, copying chunk n+1 to a staging slot while chunk n
// goes out on the socket. An async copy is answered the same way: the data must travel anyway.
func (s *Session) memcpyDtoH(d *device, m *wire.MemcpyDtoH, req uint32) error {
	stream := backend.Handle(m.Stream)
	fail := func(err error) error {
		return s.reply(req, &wire.MemcpyDtoHData{Result: int32(backend.ResultOf(err))}, 0)
	}
	if err := s.takePending(nil); err != nil {
		return fail(err)
	}
	type inflight struct {
		sl *slot
		n  int
	}
	var prev *inflight
	send := func(f *inflight, more bool) error {
		if err := d.ctx.EventSynchronize(f.sl.event); err != nil {
			return fail(err)
		}
		f.sl.pending = false
		flags := uint16(0)
		if more {
			flags = wire.FlagMore
		}
		// Header and fixed fields, then the data straight from the staging slot.
		data := &wire.MemcpyDtoHData{Data: f.sl.buf[:f.n]}
		s.out = wire.AppendHeader(s.out[:0], wire.TypeMemcpyDtoHData, flags, req, 8+f.n)
		s.out = data.AppendHead(s.out)
		if _, err := s.w.Write(s.out); err != nil {
			return err
		}
		if _, err := s.w.Write(data.Data); err != nil {
			return err
		}
		if !more {
			return s.w.Flush()
		}
		return nil
	}
	s.Stats.moved(int(m.Bytes))
	for off := uint64(0); off < m.Bytes || (m.Bytes == 0 && off == 0); {
		n := int(min(m.Bytes-off, wire.MaxChunk))
		sl, err := d.ring.take()
		if err != nil {
			return fail(err)
		}
		if err := d.ctx.MemcpyDtoH(sl.buf[:n], m.Src+off, stream, true); err != nil {
			if prev != nil {
				_ = d.ctx.EventSynchronize(prev.sl.event)
			}
			return fail(err)
		}
		if err := d.ring.busy(sl, stream); err != nil {
			return fail(err)
		}
		if prev != nil {
			if err := send(prev, true); err != nil {
				return err
			}
		}
		prev = &inflight{sl, n}
		off += uint64(n)
		if m.Bytes == 0 {
			break
		}
	}
	return send(prev, false)
}
