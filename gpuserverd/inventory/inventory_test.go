package inventory

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
)

// newServer is go-nvml's mock DGX A100 (8 GPUs) with the readings it leaves unset filled in the
// way a real driver reports them, each GPU different so a mix-up between GPUs shows.
func newServer() *dgxa100.Server {
	s := dgxa100.New()
	for i, d := range s.Devices {
		dev := d.(*dgxa100.Device)
		dev.MemoryInfo = nvml.Memory{Total: 40 << 30, Used: uint64(i+1) << 30, Free: 40<<30 - uint64(i+1)<<30}
		dev.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
			var p nvml.PciInfo
			copy(p.BusId[:], fmt.Sprintf("00000000:%02X:00.0", 0x07+i*0x10))
			p.Domain, p.Bus = 0, uint32(0x07+i*0x10)
			return p, nvml.SUCCESS
		}
		dev.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
			return nvml.Utilization{Gpu: uint32(10 * i), Memory: uint32(5 * i)}, nvml.SUCCESS
		}
		dev.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
			return []nvml.ProcessInfo{
				{Pid: uint32(1000 + i), UsedGpuMemory: 512 << 20},
				{Pid: 42, UsedGpuMemory: uint64(i) << 20},
			}, nvml.SUCCESS
		}
		dev.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 0, false, false, nvml.SUCCESS }
		dev.GetRetiredPagesPendingStatusFunc = func() (nvml.EnableState, nvml.Return) {
			return nvml.FEATURE_DISABLED, nvml.SUCCESS
		}
	}
	return s
}

func dev(s *dgxa100.Server, i int) *dgxa100.Device { return s.Devices[i].(*dgxa100.Device) }

func open(t *testing.T, s *dgxa100.Server) *Inventory {
	t.Helper()
	inv, err := Open(s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = inv.Close() })
	return inv
}

func TestGPUsMapsEveryReading(t *testing.T) {
	s := newServer()
	gpus, err := open(t, s).GPUs()
	if err != nil {
		t.Fatal(err)
	}
	if len(gpus) != 8 {
		t.Fatalf("%d GPUs, want 8", len(gpus))
	}
	for i, g := range gpus {
		d := dev(s, i)
		want := fmt.Sprintf("0000:%02x:00.0", 0x07+i*0x10)
		switch {
		case g.Index != i || g.UUID != d.UUID || g.Name != "Mock NVIDIA A100-SXM4-40GB":
			t.Errorf("gpu %d identity: %+v", i, g)
		case g.MemoryTotal != 40<<30 || g.MemoryUsed != uint64(i+1)<<30:
			t.Errorf("gpu %d memory: total %d used %d", i, g.MemoryTotal, g.MemoryUsed)
		case g.Major != 8 || g.Minor != 0:
			t.Errorf("gpu %d compute capability %d.%d", i, g.Major, g.Minor)
		case g.PCIBusID != want:
			t.Errorf("gpu %d bus id %q, want %q", i, g.PCIBusID, want)
		case g.UtilGPU != 10*i || g.UtilMemory != 5*i:
			t.Errorf("gpu %d utilisation %d/%d", i, g.UtilGPU, g.UtilMemory)
		case len(g.Processes) != 2 || g.Processes[0] != (Process{PID: uint32(1000 + i), MemoryUsed: 512 << 20}):
			t.Errorf("gpu %d processes %+v", i, g.Processes)
		case !g.Health.Healthy || len(g.Health.Problems) != 0:
			t.Errorf("gpu %d health %+v", i, g.Health)
		}
	}
	info := gpus[3].Info()
	if info.Index != 3 || info.UUID != dev(s, 3).UUID || info.MemoryBytes != 40<<30 || info.PCIBusID != "0000:37:00.0" || !info.Healthy {
		t.Fatalf("Info() = %+v", info)
	}
}

func TestOneFailingGPUDoesNotHideTheOthers(t *testing.T) {
	s := newServer()
	dev(s, 3).GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST }
	s.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i == 5 {
			return nil, nvml.ERROR_UNKNOWN
		}
		return s.Devices[i], nvml.SUCCESS
	}
	infos, err := open(t, s).Infos()
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 8 {
		t.Fatalf("%d GPUs listed, want all 8", len(infos))
	}
	for i, g := range infos {
		if want := i != 3 && i != 5; g.Healthy != want {
			t.Errorf("gpu %d healthy=%v, want %v", i, g.Healthy, want)
		}
	}
	gpus, _ := open(t, s).GPUs()
	if p := strings.Join(gpus[3].Health.Problems, ";"); !strings.Contains(p, "memory info") || !strings.Contains(p, nvml.ERROR_GPU_IS_LOST.Error()) {
		t.Errorf("gpu 3 problems %q do not say memory info failed with GPU is lost", p)
	}
	if gpus[3].UUID != dev(s, 3).UUID {
		t.Errorf("gpu 3 lost its identity along with its memory reading")
	}
	if p := strings.Join(gpus[5].Health.Problems, ";"); !strings.Contains(p, "handle") {
		t.Errorf("gpu 5 problems %q", p)
	}
}

func TestCountFailureIsAnError(t *testing.T) {
	s := newServer()
	s.DeviceGetCountFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_DRIVER_NOT_LOADED }
	_, err := open(t, s).GPUs()
	if !errors.Is(err, nvml.ERROR_DRIVER_NOT_LOADED) || !strings.Contains(err.Error(), "count GPUs") {
		t.Fatalf("got %v", err)
	}
}

func TestUnsupportedReadingsAreNotFaults(t *testing.T) {
	s := newServer()
	d := dev(s, 0)
	d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED }
	d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 0, false, false, nvml.ERROR_NOT_SUPPORTED }
	g := must(open(t, s).GPUs())[0]
	if !g.Health.Healthy || g.UtilGPU != -1 || g.UtilMemory != -1 {
		t.Fatalf("gpu with unsupported readings: %+v", g)
	}
}

func TestMemoryHealth(t *testing.T) {
	for _, tc := range []struct {
		name            string
		pending, failed bool
		rowsRet         nvml.Return
		retired         nvml.EnableState
		want            string // "" healthy
	}{
		{"remap pending", true, false, nvml.SUCCESS, nvml.FEATURE_DISABLED, "row remapping pending"},
		{"remap failed", false, true, nvml.SUCCESS, nvml.FEATURE_DISABLED, "row remapping failed"},
		{"pre-Ampere retired pages", false, false, nvml.ERROR_NOT_SUPPORTED, nvml.FEATURE_ENABLED, "retired pages pending"},
		{"pre-Ampere clean", false, false, nvml.ERROR_NOT_SUPPORTED, nvml.FEATURE_DISABLED, ""},
		{"remap query broken", false, false, nvml.ERROR_UNKNOWN, nvml.FEATURE_DISABLED, "remapped rows"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer()
			d := dev(s, 2)
			d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 1, tc.pending, tc.failed, tc.rowsRet }
			d.GetRetiredPagesPendingStatusFunc = func() (nvml.EnableState, nvml.Return) { return tc.retired, nvml.SUCCESS }
			gpus := must(open(t, s).GPUs())
			g := gpus[2]
			if tc.want == "" {
				if !g.Health.Healthy {
					t.Fatalf("unhealthy: %v", g.Health.Problems)
				}
				return
			}
			if g.Health.Healthy || !strings.Contains(strings.Join(g.Health.Problems, ";"), tc.want) {
				t.Fatalf("health %+v, want unhealthy with %q", g.Health, tc.want)
			}
			if !gpus[1].Health.Healthy {
				t.Fatalf("the neighbouring GPU turned unhealthy too")
			}
		})
	}
}

func TestProcessMemory(t *testing.T) {
	s := newServer()
	dev(s, 4).GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		// A process with two contexts on one GPU shows twice; its use is the sum.
		return []nvml.ProcessInfo{{Pid: 7, UsedGpuMemory: 100}, {Pid: 8, UsedGpuMemory: 5}, {Pid: 7, UsedGpuMemory: 20}}, nvml.SUCCESS
	}
	inv := open(t, s)
	got := must(inv.ProcessMemory(dev(s, 4).UUID))
	if len(got) != 2 || got[7] != 120 || got[8] != 5 {
		t.Fatalf("ProcessMemory = %v", got)
	}
	if _, err := inv.ProcessMemory("GPU-not-here"); !errors.Is(err, ErrNoGPU) || !strings.Contains(err.Error(), "GPU-not-here") {
		t.Fatalf("unknown GPU: %v", err)
	}
	dev(s, 4).GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_GPU_IS_LOST }
	if _, err := inv.ProcessMemory(dev(s, 4).UUID); !errors.Is(err, nvml.ERROR_GPU_IS_LOST) {
		t.Fatalf("lost GPU: %v", err)
	}
}

func TestOpenErrors(t *testing.T) {
	s := newServer()
	s.InitFunc = func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }
	if _, err := Open(s); err == nil || !strings.Contains(err.Error(), "libnvidia-ml.so.1") {
		t.Fatalf("missing library: %v", err)
	}
	s.InitFunc = func() nvml.Return { return nvml.ERROR_NO_PERMISSION }
	if _, err := Open(s); !errors.Is(err, nvml.ERROR_NO_PERMISSION) {
		t.Fatalf("no permission: %v", err)
	}
}

// TestRealNVML reads the machine's own GPUs; it skips only where libnvidia-ml.so.1 is absent.
func TestRealNVML(t *testing.T) {
	inv, err := Open(nvml.New())
	if errors.Is(err, nvml.ERROR_LIBRARY_NOT_FOUND) {
		t.Skipf("libnvidia-ml.so.1 is absent on this machine: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer inv.Close()
	v, err := inv.DriverVersion()
	if err != nil || v == "" {
		t.Fatalf("driver version %q: %v", v, err)
	}
	gpus, err := inv.GPUs()
	if err != nil || len(gpus) == 0 {
		t.Fatalf("GPUs: %v (%d)", err, len(gpus))
	}
	uuidRE := regexp.MustCompile(`^GPU-[0-9a-f-]{36}$`)
	busRE := regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)
	for _, g := range gpus {
		t.Logf("driver %s: %+v", v, g)
		if !g.Health.Healthy || g.Name == "" || !uuidRE.MatchString(g.UUID) || g.MemoryTotal < 1<<30 || g.Major < 5 || !busRE.MatchString(g.PCIBusID) {
			t.Errorf("implausible GPU %+v", g)
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestReadTakesEachReadingOfItsGPU: Read reports the GPU the UUID names, marks what NVML does not
// support as absent rather than failing, and refuses a UUID this server does not have.
func TestReadTakesEachReadingOfItsGPU(t *testing.T) {
	s := newServer()
	for i := range s.Devices {
		d := dev(s, i)
		d.GetClockInfoFunc = func(ct nvml.ClockType) (uint32, nvml.Return) { return uint32(1000 + 10*i + int(ct)), nvml.SUCCESS }
		d.GetMaxClockInfoFunc = func(ct nvml.ClockType) (uint32, nvml.Return) { return uint32(2000 + int(ct)), nvml.SUCCESS }
		d.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return uint32(30 + i), nvml.SUCCESS }
		d.GetPowerUsageFunc = func() (uint32, nvml.Return) { return uint32(100000 + i), nvml.SUCCESS }
		d.GetEnforcedPowerLimitFunc = func() (uint32, nvml.Return) { return 400000, nvml.SUCCESS }
		d.GetFanSpeedFunc = func() (uint32, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
		d.GetPerformanceStateFunc = func() (nvml.Pstates, nvml.Return) { return nvml.PSTATE_0, nvml.SUCCESS }
	}
	inv := open(t, s)
	r, err := inv.Read(dev(s, 3).UUID)
	if err != nil {
		t.Fatal(err)
	}
	want := Reading{MemoryTotal: 40 << 30, MemoryUsed: 4 << 30, UtilGPU: 30, UtilMemory: 15,
		Clocks: [4]uint32{1030, 1031, 1032, 1033}, MaxClocks: [4]uint32{2000, 2001, 2002, 2003},
		TemperatureC: 33, PowerMilliwatts: 100003, PowerLimitMilliwatts: 400000, FanPercent: -1, PState: 0}
	r.PCIDeviceID = 0 // the mock's own id
	if r != want {
		t.Fatalf("reading\n got %+v\nwant %+v", r, want)
	}
	if _, err := inv.Read("GPU-00000000-0000-0000-0000-000000000000"); !errors.Is(err, ErrNoGPU) {
		t.Fatalf("unknown GPU: %v, want ErrNoGPU", err)
	}
}
