package backend

import "os"

// A session's context can be written out and rebuilt in a fresh process, on the same GPU or
// another of the same model (issue 18): its objects keep their handles and its memory its device
// addresses, so every id and pointer the guest holds stays valid. The image describes the
// objects; the contents of the memory it lists travel apart (the worker copies them with
// MemcpyDtoH and MemcpyHtoD), so a live migration can send them ahead while the program runs.

// ContextImage is what rebuilds a context.
type ContextImage struct {
	// NextHandle is the next handle the context would give out: a restored context goes on
	// from there, so new objects never take an id the guest still holds.
	NextHandle Handle `json:"next_handle"`
	// NextAddress is where the backend places its next allocation (0: the backend's choice).
	NextAddress uint64 `json:"next_address,omitempty"`
	// Reserved is the virtual address range the backend places allocations in (base, bytes; the
	// cuda backend's): a restore reserves the same range first.
	Reserved [2]uint64 `json:"reserved,omitzero"`
	// Regions is the device memory whose contents the context needs back, at these addresses:
	// allocations, module globals, library workspaces.
	Regions     []Region         `json:"regions"`
	Modules     []ModuleImage    `json:"modules,omitempty"`
	Functions   []FunctionImage  `json:"functions,omitempty"`
	Streams     []StreamImage    `json:"streams,omitempty"`
	Events      []EventImage     `json:"events,omitempty"`
	Blas        []BlasImage      `json:"blas,omitempty"`
	FuncAttrs   []FuncAttrImage  `json:"func_attrs,omitempty"`
	Limits      map[int32]uint64 `json:"limits,omitempty"`
	CacheConfig int32            `json:"cache_config,omitempty"`
	// Shared is memory another process on the same GPU hands over (a migration between two
	// servers on one GPU: MemoryExporter), mapped by the restore instead of fresh memory, its
	// contents kept. Not part of the image's encoding: the files travel beside it.
	Shared []SharedMapping `json:"-"`
}

// SharedMapping is physical device memory mapped at Addr for Bytes, as a file (a POSIX file
// descriptor of the driver's shareable handle; the simulated backend's, a copy of the bytes).
type SharedMapping struct {
	Addr, Bytes uint64
	File        *os.File
}

// MemoryExporter is a Checkpointer whose memory another process on the same GPU can take over
// without a copy: every mapping that holds the image's regions, each as a file the caller closes.
// The context must be idle (Image waits for it) and stay so until the other process has it.
type MemoryExporter interface {
	ExportMemory() ([]SharedMapping, error)
}

// Region is device memory at Addr of Bytes; Global marks a module's global (made again by the
// module's load, not by an allocation of the program's). Mapped, where set, is the bytes the
// backend maps for the region (its size rounded to the mapping granularity); 0 is a region that
// shares a mapping with others (the cuda backend's small allocations) or a backend without
// mappings.
type Region struct {
	Addr   uint64 `json:"addr"`
	Bytes  uint64 `json:"bytes"`
	Global bool   `json:"global,omitempty"`
	Mapped uint64 `json:"mapped,omitempty"`
}

// ModuleImage is a loaded module: the image the guest sent, kept, and where its globals live.
// Globals are those whose address the program asked for, which a restore must find there again;
// Pinned (the cuda backend's) are globals the backend placed in the session's own memory (name ->
// address, bytes), which a restore links the module to again: their memory is among the regions.
// Contents are the globals the driver placed itself (name -> their bytes when imaged): the
// program never asked where they live, so a restore writes each wherever the module's new load
// puts it.
type ModuleImage struct {
	Handle   Handle               `json:"handle"`
	Image    []byte               `json:"image"`
	Globals  map[string]uint64    `json:"globals,omitempty"`
	Pinned   map[string][2]uint64 `json:"pinned,omitempty"`
	Contents map[string][]byte    `json:"contents,omitempty"`
}

// FunctionImage is a function taken from a module by name.
type FunctionImage struct {
	Handle Handle `json:"handle"`
	Module Handle `json:"module"`
	Name   string `json:"name"`
}

// StreamImage is a created stream (never the default stream, 0).
type StreamImage struct {
	Handle Handle `json:"handle"`
	Flags  uint32 `json:"flags"`
}

// EventImage is a created event; its recordings are not kept (the context is idle when imaged,
// so every recording is complete and a restored event reads complete too).
type EventImage struct {
	Handle Handle `json:"handle"`
	Flags  uint32 `json:"flags"`
}

// BlasImage is a cuBLAS (or, with Lt, cuBLASLt) handle: re-created, then given its settings back.
type BlasImage struct {
	Handle    Handle    `json:"handle"`
	Stream    Handle    `json:"stream,omitempty"`
	MathMode  uint32    `json:"math_mode,omitempty"`
	Workspace [2]uint64 `json:"workspace,omitempty"` // ptr, bytes
	Lt        bool      `json:"lt,omitempty"`
}

// FuncAttrImage is an attribute the program set on a function.
type FuncAttrImage struct {
	Function Handle `json:"function"`
	Attr     int32  `json:"attr"`
	Value    int32  `json:"value"`
}

// Checkpointer is a Context that can describe itself for a restore.
type Checkpointer interface {
	// Image waits for the context's work and describes it. State it cannot rebuild (graphs,
	// pools, cuDNN handles...) is refused with ErrNotSupported wrapped in an error naming it.
	Image() (*ContextImage, error)
}

// Restorer is a Backend that rebuilds a context from its image, on ordinal. The regions come
// back at their addresses with undefined contents; the caller writes them.
type Restorer interface {
	RestoreContext(ordinal int, img *ContextImage) (Context, error)
}
