package cuda

import (
	"testing"

	"gpucloud/gpuserverd/backend"
)

// Benchmarks of the backend itself (cgo + context binding + handle tables, no network), to set
// against gpubench's native C figures: the difference is what gpuserverd's worker adds per call
// before any wire protocol. They skip where libcuda.so.1 is absent, like the GPU tests.

func benchCtx(b *testing.B) *Context {
	b.Helper()
	if err := load(libraryName); err != nil {
		b.Skipf("libcuda.so.1 is absent on this machine: %v", err)
	}
	be, err := Open()
	if err != nil {
		b.Fatal(err)
	}
	c, err := be.NewContext(0)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	return c.(*Context)
}

func benchEmpty(b *testing.B, c *Context) backend.Handle {
	m, err := c.ModuleLoadData(axpyPTX)
	if err != nil {
		b.Fatal(err)
	}
	f, err := c.ModuleGetFunction(m, "empty")
	if err != nil {
		b.Fatal(err)
	}
	return f
}

func BenchmarkLaunchAsync(b *testing.B) {
	c := benchCtx(b)
	s, err := c.StreamCreate(1)
	if err != nil {
		b.Fatal(err)
	}
	cfg := backend.LaunchConfig{Function: benchEmpty(b, c), Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}, Stream: s}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := c.LaunchKernel(cfg); err != nil {
			b.Fatal(err)
		}
	}
	if err := c.StreamSynchronize(s); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkLaunchSync(b *testing.B) {
	c := benchCtx(b)
	cfg := backend.LaunchConfig{Function: benchEmpty(b, c), Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := c.LaunchKernel(cfg); err != nil {
			b.Fatal(err)
		}
		if err := c.Synchronize(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAllocFree1MiB(b *testing.B) {
	c := benchCtx(b)
	for i := 0; i < b.N; i++ {
		p, err := c.MemAlloc(1 << 20)
		if err != nil {
			b.Fatal(err)
		}
		if err := c.MemFree(p); err != nil {
			b.Fatal(err)
		}
	}
}

func benchCopy(b *testing.B, pinned, h2d bool) {
	const n = 64 << 20
	c := benchCtx(b)
	var host []byte
	if pinned {
		var err error
		if host, err = c.HostAlloc(n); err != nil {
			b.Fatal(err)
		}
	} else {
		host = make([]byte, n)
	}
	for i := range host {
		host[i] = byte(i)
	}
	p, err := c.MemAlloc(n)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(n)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if h2d {
			err = c.MemcpyHtoD(p, host, 0, false)
		} else {
			err = c.MemcpyDtoH(host, p, 0, false)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkHtoDPinned64MiB(b *testing.B)   { benchCopy(b, true, true) }
func BenchmarkDtoHPinned64MiB(b *testing.B)   { benchCopy(b, true, false) }
func BenchmarkHtoDPageable64MiB(b *testing.B) { benchCopy(b, false, true) }
func BenchmarkDtoHPageable64MiB(b *testing.B) { benchCopy(b, false, false) }
