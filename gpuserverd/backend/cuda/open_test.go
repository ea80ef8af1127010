package cuda

import (
	"errors"
	"strings"
	"testing"

	"gpucloud/gpuserverd/backend"
)

// These run on every machine: they pin down how the backend fails where there is no driver.

func TestOpenFailsCleanlyWithoutDriver(t *testing.T) {
	if err := load(LibraryName); err == nil {
		t.Skip("libcuda.so.1 is present here; the no-driver path is not reachable")
	}
	_, err := backend.Open(Kind)
	if err == nil {
		t.Fatal("backend.Open(cuda) succeeded on a machine without libcuda.so.1")
	}
	for _, want := range []string{"backend cuda", "libcuda.so.1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}

func TestRegisteredAsCuda(t *testing.T) {
	found := false
	for _, k := range backend.Kinds() {
		found = found || k == Kind
	}
	if !found {
		t.Fatalf("kind %q not registered; have %v", Kind, backend.Kinds())
	}
}

func TestLoadNamesMissingSymbol(t *testing.T) {
	// libc is a real library that lacks every CUDA entry point.
	err := loadUncached("libc.so.6")
	if err == nil {
		t.Fatal("loading libc.so.6 as the CUDA driver succeeded")
	}
	if !strings.Contains(err.Error(), "missing symbol cuGetErrorName") {
		t.Fatalf("error %q does not name the missing symbol", err)
	}
}

func TestLoadNamesMissingLibrary(t *testing.T) {
	err := loadUncached("libcuda-does-not-exist.so.9")
	if err == nil || !strings.Contains(err.Error(), "libcuda-does-not-exist.so.9") {
		t.Fatalf("got %v, want an error naming the library", err)
	}
}

func TestErrorCarriesDriverCode(t *testing.T) {
	err := check("cuMemAlloc", 2)
	if got := backend.ResultOf(err); got != backend.ErrOutOfMemory {
		t.Fatalf("ResultOf = %d, want %d", got, backend.ErrOutOfMemory)
	}
	var e *Error
	if !errors.As(err, &e) || e.Op != "cuMemAlloc" || !strings.Contains(err.Error(), "cuMemAlloc") {
		t.Fatalf("error %v does not name the call", err)
	}
	if check("x", 0) != nil {
		t.Fatal("CUDA_SUCCESS became an error")
	}
}

func TestFormatUUID(t *testing.T) {
	u := [16]byte{0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0xff}
	want := "GPU-deadbeef-0102-0304-0506-0708090a0bff"
	if got := FormatUUID(u); got != want {
		t.Fatalf("FormatUUID = %q, want %q", got, want)
	}
}
