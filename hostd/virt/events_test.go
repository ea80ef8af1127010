package virt_test

import (
	"testing"
	"time"

	"gpucloud/hostd/virt"
)

func TestLifecycleEvents(t *testing.T) {
	if err := virt.StartEventLoop(); err != nil {
		t.Fatal(err)
	}
	h, err := virt.Open("test:///default", "")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	got := make(chan string, 16)
	if err := h.OnLifecycle(func(name string) { got <- name }); err != nil {
		t.Fatal(err)
	}
	if err := h.Define(spec(t.TempDir(), "ev1")); err != nil {
		t.Fatal(err)
	}
	defer h.Undefine("gpucloud-ev1")
	if err := h.Start("gpucloud-ev1"); err != nil {
		t.Fatal(err)
	}
	select {
	case name := <-got:
		if name != "gpucloud-ev1" {
			t.Fatalf("event for %q", name)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no lifecycle event within 10s")
	}
}
