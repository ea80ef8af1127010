package guesttest

import (
	"strings"
	"testing"

	"gpucloud/internal/sessiontoken"
)

// TestExportTables runs export_test: the private tables NVIDIA's runtime fetches with
// cuGetExportTable, served over a real session (module loading from fat binaries, primary
// contexts, context-local storage and its destructors), cuGetProcAddress's stream flags and
// versions, and stand-ins for missing functions. Unknown entries must fail loudly, naming
// themselves.
func TestExportTables(t *testing.T) {
	out := runOK(t, startServer(t), "export_test")
	for _, want := range []string{
		"gpucloud: CUDART_INTERFACE[3] (a private runtime entry) is not supported",
		"gpucloud: CUDART_INTERFACE[8] with 1 host-variable registrations is not supported",
		"gpucloud: cuGraphAddChildGraphNode is not implemented (CUDA_ERROR_NOT_SUPPORTED)",
		// NVIDIA's runtime asking for its driver-authentication table gets a clear word, once.
		"gpucloud: this program uses NVIDIA's CUDA runtime",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "this program uses NVIDIA's CUDA runtime"); n != 1 {
		t.Errorf("the NVIDIA-runtime notice came %d times, want once:\n%s", n, out)
	}
	if strings.Contains(out, "gpucloud-trace") {
		t.Errorf("trace lines without GPUCLOUD_TRACE:\n%s", out)
	}
}

// TestTrace checks the opt-in trace names what a program asks of the driver: proc-address
// lookups with version and flags, export tables by UUID, entries called, frames sent.
func TestTrace(t *testing.T) {
	out := runOK(t, startServer(t), "export_test", "GPUCLOUD_TRACE=1")
	for _, want := range []string{
		"gpucloud-trace: cuGetExportTable 6bd5fb6c-5bf4-e74a-8987-d93912fd9df9 (CUDART_INTERFACE) -> 0",
		"gpucloud-trace: cuGetExportTable d4082055-bde6-704b-8d34-ba123c66e1f2 (unknown) -> 500",
		"gpucloud-trace: cuGetProcAddress cuMemcpyAsync version 12000 flags 2 -> found",
		"gpucloud-trace: cuGetProcAddress cuGraphAddChildGraphNode version 12000 flags 0 -> not found",
		"gpucloud-trace: CUDART_INTERFACE[2] primary context of device 0 -> 0",
		"gpucloud-trace: CONTEXT_LOCAL_STORAGE set ctx",
		"gpucloud-trace: send ModuleLoad",
		"gpucloud-trace: send LaunchKernel",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in the trace:\n%s", want, out)
		}
	}
}

// runOK runs a C test program in its own dedicated session, with extra environment, and returns
// its output after checking it ends with "<prog>: OK".
func runOK(t *testing.T, s *gpuserverd, prog string, env ...string) string {
	t.Helper()
	cmd := s.client(s.token("s-"+prog, sessiontoken.TierDedicated, 0), prog)
	cmd.Env = append(cmd.Env, env...)
	b, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(b), prog+": OK") {
		t.Fatalf("%s: %v\n%s", prog, err, b)
	}
	return string(b)
}
