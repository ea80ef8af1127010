package sim

import (
	"errors"
	"testing"

	"gpucloud/gpuserverd/backend"
)

func TestLimitsAndCacheConfig(t *testing.T) {
	b, c := newCtx(t, 1<<20)
	if v, err := c.Limit(0); err != nil || v != 1024 {
		t.Fatalf("default stack size %d, %v", v, err)
	}
	if err := c.SetLimit(2, 64<<20); err != nil {
		t.Fatal(err)
	}
	if v, _ := c.Limit(2); v != 64<<20 {
		t.Fatalf("heap limit reads %d", v)
	}
	if err := c.SetLimit(42, 1); !errors.Is(err, backend.ErrUnsupportedLimit) {
		t.Fatalf("unknown limit: %v", err)
	}
	if _, err := c.Limit(-1); !errors.Is(err, backend.ErrUnsupportedLimit) {
		t.Fatalf("unknown limit: %v", err)
	}
	if err := c.SetLimit(5, 48); !errors.Is(err, backend.ErrInvalidValue) {
		t.Fatalf("L2 fetch granularity 48: %v", err)
	}
	if v, _ := c.Limit(5); v != 64 {
		t.Fatalf("a refused setting changed the limit to %d", v)
	}
	// Another context (another session's worker) keeps its own.
	c2, err := b.NewContext(0)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if v, _ := c2.Limit(2); v != 8<<20 {
		t.Fatalf("another context's heap limit reads %d", v)
	}

	if err := c.SetCacheConfig(1); err != nil {
		t.Fatal(err)
	}
	if err := c.SetCacheConfig(4); !errors.Is(err, backend.ErrInvalidValue) {
		t.Fatalf("cache configuration 4: %v", err)
	}
	if v, _ := c.CacheConfig(); v != 1 {
		t.Fatalf("cache configuration reads %d", v)
	}
	if v, _ := c2.CacheConfig(); v != 0 {
		t.Fatalf("another context's cache configuration reads %d", v)
	}
}
