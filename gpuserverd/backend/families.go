package backend

import (
	"math/big"
	"os"
)

// The hand-written driver-API families (issue 14): optional interfaces a Context implements when
// its backend supports them. The worker asks for each by type assertion and answers
// ErrNotSupported where a backend lacks one, so a backend grows family by family.

// More codes the families produce.
const (
	ErrInvalidAddressSpace        Result = 717 // CUDA_ERROR_INVALID_ADDRESS_SPACE
	ErrIllegalState               Result = 401 // CUDA_ERROR_ILLEGAL_STATE
	ErrCooperativeLaunchTooLarge  Result = 720 // CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE
	ErrStreamCaptureUnsupported   Result = 900 // CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
	ErrStreamCaptureInvalidated   Result = 901 // CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
	ErrStreamCaptureUnmatched     Result = 903 // CUDA_ERROR_STREAM_CAPTURE_UNMATCHED
	ErrStreamCaptureWrongThread   Result = 908 // CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD
	ErrGraphExecUpdateFailure     Result = 910 // CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE
	ErrPeerAccessUnsupportedOnDev Result = 217 // CUDA_ERROR_PEER_ACCESS_UNSUPPORTED
)

// AllocProps describes a physical allocation (CUmemAllocationProp's fields that matter here).
type AllocProps struct {
	Type         uint32 // CUmemAllocationType: 1 pinned
	LocationType uint32 // CUmemLocationType: 1 device
	LocationID   int32
	HandleTypes  uint32
	Size         uint64
	Compression  uint32 // CUmemAllocationCompType: 1 generic (compressible memory); the driver may give less
}

// VirtualMemory is cuMemAddressReserve and friends. Physical allocations are Handles.
type VirtualMemory interface {
	MemAddressReserve(size, alignment, addr uint64, flags uint64) (uint64, error)
	MemAddressFree(ptr, size uint64) error
	MemCreate(p AllocProps, flags uint64) (Handle, error)
	MemRelease(h Handle) error
	MemMap(ptr, size, offset uint64, h Handle, flags uint64) error
	MemUnmap(ptr, size uint64) error
	MemSetAccess(ptr, size uint64, locType uint32, locID int32, flags uint32) error
	MemGetAllocationGranularity(p AllocProps, option uint32) (uint64, error)
	MemGetAllocationProperties(h Handle) (AllocProps, error)
	MemRetainAllocationHandle(ptr uint64) (Handle, error)
}

// PoolProps describes a memory pool (CUmemPoolProps).
type PoolProps struct {
	AllocType    uint32
	HandleTypes  uint32
	LocationType uint32
	LocationID   int32
	MaxSize      uint64
}

// MemPools is stream-ordered allocation. Pool 0 in MemAllocAsync is the device's current pool.
type MemPools interface {
	MemAllocAsync(bytes uint64, stream, pool Handle) (uint64, error)
	// MemFreeAsync returns the allocation's size, for the worker's quota accounting.
	MemFreeAsync(ptr uint64, stream Handle) (uint64, error)
	MemPoolCreate(p PoolProps) (Handle, error)
	MemPoolDestroy(pool Handle) error
	MemPoolSetAttribute(pool Handle, attr int32, value uint64) error
	MemPoolGetAttribute(pool Handle, attr int32) (uint64, error)
	MemPoolTrimTo(pool Handle, minBytes uint64) error
	// DefaultMemPool and CurrentMemPool are the context's device's pools; SetMemPool sets the current one.
	DefaultMemPool() (Handle, error)
	CurrentMemPool() (Handle, error)
	SetMemPool(pool Handle) error
}

// ArrayDesc is a CUDA_ARRAY3D_DESCRIPTOR (Height and Depth 0 for fewer dimensions).
type ArrayDesc struct {
	Width, Height, Depth uint64
	Format               uint32 // CUarray_format
	Channels             uint32
	Flags                uint32
}

// Side kinds of a 3-D copy (CUmemorytype numbers).
const (
	SideHost   = 1
	SideDevice = 2
	SideArray  = 3
)

// CopySide is one side of a 3-D copy: device memory (Ptr, Pitch bytes a row, Height rows a slice)
// or an array (Ptr is its Handle); X is in bytes, Y and Z in rows and slices.
type CopySide struct {
	Kind          uint32
	Ptr           uint64
	Pitch, Height uint64
	X, Y, Z       uint64
}

// Copy3D is a box of Width bytes by Height rows by Depth slices between two sides. A host side's
// data is packed (Host, rows of Width bytes without padding).
type Copy3D struct {
	Src, Dst             CopySide
	Width, Height, Depth uint64
	Host                 []byte
	Stream               Handle
	Async                bool
}

// Arrays is CUDA arrays and the 3-D copies between arrays, device and host memory.
type Arrays interface {
	ArrayCreate(d ArrayDesc) (Handle, error)
	ArrayDestroy(a Handle) error
	ArrayDescriptor(a Handle) (ArrayDesc, error)
	Memcpy3D(c Copy3D) error
}

// ResourceDesc is a CUDA_RESOURCE_DESC: an array (Type 0, Handle), linear memory (2: Handle is
// the address, SizeBytes) or pitched 2-D memory (3: Width, Height, Pitch).
type ResourceDesc struct {
	Type                 uint32
	Handle               uint64
	Format, Channels     uint32
	Width, Height, Pitch uint64
	SizeBytes            uint64
	Flags                uint32
}

// Textures is texture and surface objects. TexDesc and ViewDesc are the driver's structures as
// bytes (plain values; empty: none).
type Textures interface {
	TexObjectCreate(r ResourceDesc, texDesc, viewDesc []byte) (uint64, error)
	TexObjectDestroy(obj uint64) error
	TexObjectResourceDesc(obj uint64) (ResourceDesc, error)
	SurfObjectCreate(r ResourceDesc) (uint64, error)
	SurfObjectDestroy(obj uint64) error
}

// CaptureInfo is cuStreamGetCaptureInfo's answer: Status 0 none, 1 active, 2 invalidated.
type CaptureInfo struct {
	Status uint32
	ID     uint64
}

// MemsetNode is CUDA_MEMSET_NODE_PARAMS.
type MemsetNode struct {
	Dst, Pitch    uint64
	Value         uint32
	ElemSize      uint32
	Width, Height uint64
}

// Graphs is CUDA graphs and stream capture. Nodes are Handles of the context; deps name nodes of
// the same graph.
type Graphs interface {
	StreamBeginCapture(stream Handle, mode uint32) error
	StreamEndCapture(stream Handle) (Handle, error)
	StreamCaptureInfo(stream Handle) (CaptureInfo, error)
	GraphCreate(flags uint32) (Handle, error)
	GraphDestroy(g Handle) error
	GraphAddKernelNode(g Handle, deps []Handle, cfg LaunchConfig) (Handle, error)
	GraphAddMemsetNode(g Handle, deps []Handle, p MemsetNode) (Handle, error)
	GraphAddMemcpyNode(g Handle, deps []Handle, c Copy3D) (Handle, error)
	GraphAddEmptyNode(g Handle, deps []Handle) (Handle, error)
	// GraphNodes lists the graph's nodes and their CUgraphNodeType.
	GraphNodes(g Handle) ([]Handle, []uint32, error)
	GraphInstantiate(g Handle, flags uint64) (Handle, error)
	GraphLaunch(exec, stream Handle) error
	GraphExecDestroy(exec Handle) error
	// GraphExecUpdate returns a CUgraphExecUpdateResult (0: success).
	GraphExecUpdate(exec, g Handle) (uint32, error)
}

// LaunchEx is a launch's attributes beyond cuLaunchKernel's (cuLaunchKernelEx).
type LaunchEx struct {
	Cooperative bool
	Cluster     [3]uint32 // 0s: none
	Priority    int32
}

// Launches is cuLaunchKernelEx and cuLaunchCooperativeKernel.
type Launches interface {
	LaunchKernelEx(cfg LaunchConfig, ex LaunchEx) error
}

// formatBytes are the bytes of one channel per CUarray_format (the plain formats; block-compressed
// ones are not offered).
var formatBytes = map[uint32]uint64{0x01: 1, 0x02: 2, 0x03: 4, 0x08: 1, 0x09: 2, 0x0a: 4, 0x10: 2, 0x20: 4}

// ElementBytes is the size of one element of format with channels (1, 2 or 4), or 0 when either
// is not one this platform offers.
func ElementBytes(format, channels uint32) uint64 {
	if channels != 1 && channels != 2 && channels != 4 {
		return 0
	}
	return formatBytes[format] * uint64(channels)
}

// Bytes is the array's size, or 0 for a descriptor no array has (bad format, zero width, a
// depth without height, an overflow).
func (d ArrayDesc) Bytes() uint64 {
	e := ElementBytes(d.Format, d.Channels)
	if e == 0 || d.Width == 0 || (d.Depth > 0 && d.Height == 0) {
		return 0
	}
	n := new(big.Int).SetUint64(d.Width * e)
	if d.Width*e/e != d.Width {
		return 0
	}
	n.Mul(n, new(big.Int).SetUint64(max(d.Height, 1)))
	n.Mul(n, new(big.Int).SetUint64(max(d.Depth, 1)))
	if !n.IsUint64() {
		return 0
	}
	return n.Uint64()
}

// Stream memory operations (StreamMemOps.StreamMemOp's op).
const (
	MemOpWait32  = 1
	MemOpWrite32 = 2
	MemOpWait64  = 3
	MemOpWrite64 = 4
)

// StreamMemOps is cuStreamWaitValue32/64 and cuStreamWriteValue32/64: a stream waits until a
// word of device memory meets a condition (flags' low bits: CU_STREAM_WAIT_VALUE_GEQ 0, EQ 1,
// AND 2, NOR 3), or writes one.
type StreamMemOps interface {
	StreamMemOp(stream Handle, op uint32, addr, value uint64, flags uint32) error
}

// TensorMapParams are cuTensorMapEncodeTiled's (Im2col false) or cuTensorMapEncodeIm2col's.
type TensorMapParams struct {
	Im2col                                    bool
	DataType, Rank                            uint32
	Address                                   uint64
	GlobalDim, GlobalStrides                  []uint64
	BoxDim, ElementStrides                    []uint32 // BoxDim: tiled only
	LowerCorner, UpperCorner                  []int32  // im2col only
	ChannelsPerPixel, PixelsPerColumn         uint32   // im2col only
	Interleave, Swizzle, L2Promotion, OOBFill uint32
}

// TensorMaps is Hopper's tensor-map encoding: host computation producing a 128-byte descriptor
// that kernels read.
type TensorMaps interface {
	TensorMapEncode(p TensorMapParams) ([128]byte, error)
}

// Linker is JIT linking (cuLink*): inputs of a CUjitInputType, linked into one image.
type Linker interface {
	LinkCreate() (Handle, error)
	LinkAddData(link Handle, typ uint32, name string, data []byte) error
	LinkComplete(link Handle) ([]byte, error)
	LinkDestroy(link Handle) error
}

// HostMapper gives the device address of host memory registered with HostRegister
// (cuMemHostGetDevicePointer of device-mapped memory): a kernel reads and writes the host's
// bytes through it, with no copy (zero-copy, the guest's shared arena).
type HostMapper interface {
	HostDevicePointer(registered []byte) (uint64, error)
}

// The kinds of objects IPC shares between the processes of one instance (the wire's
// IpcExport.kind).
const (
	IpcMemory      = 1 // cuMemAlloc memory, by its address (cuIpcGetMemHandle)
	IpcEvent       = 2 // an event created with CU_EVENT_INTERPROCESS (cuIpcGetEventHandle)
	IpcAllocation  = 3 // a cuMemCreate allocation handle (cuMemExportToShareableHandle)
	IpcPool        = 4 // a memory pool (cuMemPoolExportToShareableHandle)
	IpcPoolPointer = 5 // a pool's allocation, by its address (cuMemPoolExportPointer)
)

// IPC shares objects with another process's context on the same server (issue 14). IpcExport
// gives what that context needs to open the object: bytes (NVIDIA's handle, at most 256) and,
// for a shareable handle, a file descriptor the caller then owns. IpcImport opens it there (fd
// may be nil; the callee does not keep it): a device address, an event, an allocation handle
// or a pool, which the context's ordinary calls use and end (EventDestroy, MemRelease,
// MemPoolDestroy, MemFreeAsync), except imported memory (IpcMemory), which IpcCloseMemory ends.
// pool is the imported pool an IpcPoolPointer belongs to; flags are cuIpcOpenMemHandle's.
type IPC interface {
	IpcExport(kind uint32, object uint64, handleType uint32) (blob []byte, fd *os.File, err error)
	IpcImport(kind uint32, blob []byte, fd *os.File, pool Handle, flags uint32) (uint64, error)
	IpcCloseMemory(ptr uint64) error
}

// PoolAccess is cuMemPoolGetAccess and cuMemPoolSetAccess: what a location (a CUmemLocation's
// type and id) may do with a pool's memory (CUmemAccess_flags: 0 none, 1 read, 3 read-write).
type PoolAccess interface {
	MemPoolGetAccess(pool Handle, locType uint32, locID int32) (uint32, error)
	MemPoolSetAccess(pool Handle, locType uint32, locID int32, flags uint32) error
}
