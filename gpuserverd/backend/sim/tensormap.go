package sim

import (
	"encoding/binary"
	"fmt"

	"gpucloud/gpuserverd/backend"
)

var _ backend.TensorMaps = (*Context)(nil)

// tensorElemBytes are the bytes of an element per CUtensorMapDataType (0 to 12; the packed
// sub-byte types 13 to 15 are not simulated).
var tensorElemBytes = []uint64{1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4}

// TensorMapEncode checks the parameters as NVIDIA documents them and returns a deterministic
// encoding of them. It is NOT NVIDIA's (which is undocumented): the simulator's kernels never
// read tensor maps, so only the checks and the determinism are what a program can observe.
func (c *Context) TensorMapEncode(p backend.TensorMapParams) ([128]byte, error) {
	var out [128]byte
	bad := func(what string, args ...any) ([128]byte, error) {
		return out, fmt.Errorf("tensor map: "+what+": %w", append(args, backend.ErrInvalidValue)...)
	}
	minRank := uint32(1)
	if p.Im2col || p.Interleave != 0 {
		minRank = 3
	}
	if p.Rank < minRank || p.Rank > 5 || uint32(len(p.GlobalDim)) != p.Rank || uint32(len(p.GlobalStrides)) != p.Rank-1 ||
		uint32(len(p.ElementStrides)) != p.Rank {
		return bad("rank %d with %d dims, %d strides, %d element strides", p.Rank, len(p.GlobalDim), len(p.GlobalStrides), len(p.ElementStrides))
	}
	if int(p.DataType) >= len(tensorElemBytes) || p.Interleave > 2 || p.Swizzle > 3 || p.L2Promotion > 3 || p.OOBFill > 1 {
		return bad("data type %d, interleave %d, swizzle %d, L2 promotion %d, fill %d", p.DataType, p.Interleave, p.Swizzle, p.L2Promotion, p.OOBFill)
	}
	align := uint64(16)
	if p.Interleave == 2 {
		align = 32
	}
	if p.Address%align != 0 {
		return bad("address %#x not %d-byte aligned", p.Address, align)
	}
	for i, d := range p.GlobalDim {
		if d == 0 || d > 1<<32 {
			return bad("dimension %d of %d", i, d)
		}
	}
	for i, s := range p.GlobalStrides {
		if s%align != 0 || s >= 1<<40 {
			return bad("stride %d of %d bytes (a multiple of %d below 2^40)", i, s, align)
		}
	}
	for i, e := range p.ElementStrides {
		if e == 0 || e > 8 {
			return bad("element stride %d of %d (1 to 8)", i, e)
		}
	}
	elem := tensorElemBytes[p.DataType]
	if p.Im2col {
		n := int(p.Rank) - 2
		if len(p.LowerCorner) != n || len(p.UpperCorner) != n || p.ChannelsPerPixel == 0 || p.ChannelsPerPixel > 256 ||
			p.PixelsPerColumn == 0 || p.PixelsPerColumn > 1024 {
			return bad("im2col corners %v..%v, %d channels, %d pixels", p.LowerCorner, p.UpperCorner, p.ChannelsPerPixel, p.PixelsPerColumn)
		}
	} else {
		if uint32(len(p.BoxDim)) != p.Rank {
			return bad("%d box dimensions for rank %d", len(p.BoxDim), p.Rank)
		}
		for i, b := range p.BoxDim {
			if b == 0 || b > 256 {
				return bad("box dimension %d of %d (1 to 256)", i, b)
			}
		}
		inner := uint64(p.BoxDim[0]) * elem
		if p.Interleave == 0 && inner%16 != 0 {
			return bad("inner box of %d bytes, not a multiple of 16", inner)
		}
		if span := [4]uint64{0, 32, 64, 128}[p.Swizzle]; p.Interleave == 0 && span > 0 && inner > span {
			return bad("inner box of %d bytes past the %d-byte swizzle span", inner, span)
		}
	}
	// The encoding: every parameter in a fixed place.
	q := func(i int, v uint64) { binary.LittleEndian.PutUint64(out[8*i:], v) }
	q(0, p.Address)
	flags := uint64(p.DataType) | uint64(p.Rank)<<8 | uint64(p.Interleave)<<16 | uint64(p.Swizzle)<<20 |
		uint64(p.L2Promotion)<<24 | uint64(p.OOBFill)<<28
	if p.Im2col {
		flags |= 1<<31 | uint64(p.ChannelsPerPixel)<<32 | uint64(p.PixelsPerColumn)<<44
	}
	q(1, flags)
	for i, d := range p.GlobalDim {
		q(2+i, d)
	}
	for i, s := range p.GlobalStrides {
		q(7+i, s)
	}
	for i, e := range p.ElementStrides {
		out[88+i] = byte(e)
	}
	for i, b := range p.BoxDim {
		binary.LittleEndian.PutUint16(out[96+2*i:], uint16(b))
	}
	for i := range p.LowerCorner {
		out[106+i], out[109+i] = byte(p.LowerCorner[i]), byte(p.UpperCorner[i])
	}
	return out, nil
}
