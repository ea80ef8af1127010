package worker

import (
	"testing"

	"gpucloud/gpuserverd/backend/sim"
	"gpucloud/gpuserverd/wire"
)

// FuzzMultiGPUSession: any bytes from a guest of a two-GPU session, seeded with peer access, peer
// copies and NCCL calls, are answered or refused and the session ends; never a crash or hang.
func FuzzMultiGPUSession(f *testing.F) {
	seed := func(msgs ...wire.Message) []byte {
		var b []byte
		for i, m := range msgs {
			b = wire.AppendFrame(b, m, 0, uint32(i+1))
		}
		return b
	}
	const p0, p1 = 0x7f2d00000000, 0x7f2c00000000 // the first allocation on each (backend 1, 0)
	f.Add(seed(&wire.MemAlloc{Bytes: 64}, &wire.SetDevice{Ordinal: 1}, &wire.MemAlloc{Bytes: 64},
		&wire.PeerAccess{Peer: 0, Enable: 1}, &wire.PeerAccess{Peer: 0, Enable: 1},
		&wire.MemcpyPeer{Dst: p1, DstDevice: 1, Src: p0, SrcDevice: 0, Bytes: 64},
		&wire.MemcpyDtoD{Dst: p0, Src: p1, Bytes: 32}))
	f.Add(seed(&wire.MemAlloc{Bytes: 64}, &wire.SetDevice{Ordinal: 1}, &wire.MemAlloc{Bytes: 64},
		&wire.NcclGetUniqueId{}, &wire.NcclCommInit{Nranks: 2, Rank: 0, Device: 0},
		&wire.NcclCommInit{Nranks: 2, Rank: 1, Device: 1},
		&wire.NcclCollective{Comm: 1, Kind: 0, Send: p0, Recv: p0, Count: 16, Datatype: 7},
		&wire.NcclCollective{Comm: 2, Kind: 0, Send: p1, Recv: p1, Count: 16, Datatype: 7},
		&wire.NcclCollective{Comm: 1, Kind: 5, Send: p0, Count: 4, Datatype: 2, Peer: 1},
		&wire.NcclCollective{Comm: 2, Kind: 6, Recv: p1, Count: 4, Datatype: 2},
		&wire.NcclCommDestroy{Comm: 1}))
	f.Add(seed(&wire.MemAlloc{Bytes: 64}, &wire.NcclGroup{Start: 1}, &wire.NcclGetUniqueId{},
		&wire.NcclCommInit{Nranks: 1, Rank: 0, Device: 0}, &wire.NcclGroup{Start: 0}, &wire.NcclGroup{Start: 0},
		&wire.NcclRedOp{Comm: 1, Create: 1, Datatype: 7, Residence: 1, Scalar: 0x40000000},
		&wire.NcclRedOp{Comm: 1, Create: 1, Datatype: 7, Residence: 0, Scalar: p0},
		&wire.NcclCollective{Comm: 1, Kind: 0, Send: p0, Recv: p0, Count: 16, Datatype: 7, Op: 5},
		&wire.NcclCommSplit{Comm: 1, Color: -2}, &wire.NcclCommQuery{Comm: 1, What: 0},
		&wire.NcclCommQuery{Comm: 1, What: 1}, &wire.NcclCommQuery{Comm: 1, What: 2}))
	f.Fuzz(func(t *testing.T, in []byte) {
		serveBytes(t, Config{Tier: "dedicated", Devices: []int{1, 0}}, sim.New(2, 1<<24), false, in)
	})
}
