package guesttest

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// loaderFixture is what the loader tests share: gpucloud's libraries (the build folder, standing
// for /usr/lib/gpucloud), the auditor, and a decoy libcudart.so.13 in a folder of its own that
// rpath_probe and ext.so name in their DT_RPATH, as torch's libraries name the wheel's.
type loaderFixture struct {
	ours, audit, decoy, probe, ext string
}

func buildLoader(t *testing.T) loaderFixture {
	t.Helper()
	ours := buildCudart(t)
	tmp := t.TempDir()
	f := loaderFixture{
		ours:  ours,
		audit: filepath.Join(tmp, "libgpucloud-audit.so"),
		decoy: filepath.Join(tmp, "nvidia", "cu13", "lib"),
		probe: filepath.Join(tmp, "rpath_probe"),
		ext:   filepath.Join(tmp, "ext", "libext.so"),
	}
	for _, d := range []string{f.decoy, filepath.Dir(f.ext)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	decoyLib := filepath.Join(f.decoy, "libcudart.so.13")
	rpath := "-Wl,--disable-new-dtags,-rpath," + f.decoy // DT_RPATH, searched before LD_LIBRARY_PATH
	steps := [][]string{
		{"make", "-s", "-C", "../loader", "BUILD=" + tmp, "WERROR=-Werror"},
		{"gcc", "-Wall", "-Werror", "-fPIC", "-shared", "-Wl,-soname,libcudart.so.13", "-o", decoyLib, "../loader/testdata/decoy_cudart.c"},
		{"gcc", "-Wall", "-Werror", "-fPIC", "-shared", rpath, "-o", f.ext, "../loader/testdata/ext.c", decoyLib},
		rpathProbe(f.probe, f.decoy, decoyLib),
	}
	for _, s := range steps {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", s, err, out)
		}
	}
	out, err := exec.Command("readelf", "-d", f.probe).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "(RPATH)") {
		t.Fatalf("rpath_probe has no DT_RPATH: %v\n%s", err, out)
	}
	return f
}

// rpathProbe is the command that builds rpath_probe at out with a DT_RPATH (not RUNPATH) naming
// dir, linked against the decoy library there.
func rpathProbe(out, dir, decoyLib string) []string {
	return []string{"gcc", "-Wall", "-Werror", "-Wl,--disable-new-dtags,-rpath," + dir, "-o", out,
		"../loader/testdata/rpath_probe.c", decoyLib, "-ldl"}
}

// run runs rpath_probe with args under env (on top of a clean environment) and gives its
// stdout and stderr.
func (f loaderFixture) run(t *testing.T, env []string, args ...string) (string, string) {
	t.Helper()
	cmd := exec.Command(f.probe, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("rpath_probe %v (%v): %v\n%s%s", args, env, err, stdout.String(), stderr.String())
	}
	return stdout.String(), stderr.String()
}

func (f loaderFixture) audited(extra ...string) []string {
	return append([]string{"LD_AUDIT=" + f.audit, "GPUCLOUD_LIBDIR=" + f.ours}, extra...)
}

// TestLoaderAuditBeatsRPath: a program whose DT_RPATH names a folder with another
// libcudart.so.13 gets gpucloud's under the auditor: through its DT_NEEDED entry, through a
// library it dlopens (Python loading torch), and when it dlopens the other one by path (torch's
// preloading of the wheel's libraries); with GPUCLOUD_NATIVE=1 it gets the other one again.
func TestLoaderAuditBeatsRPath(t *testing.T) {
	f := buildLoader(t)
	ours := filepath.Join(f.ours, "libcudart.so.13")
	decoy := filepath.Join(f.decoy, "libcudart.so.13")
	modes := [][]string{nil, {f.ext}, {decoy, "path"}}

	// Without the auditor, DT_RPATH wins: the problem this solves, shown on the same binaries.
	for _, args := range modes {
		out, errOut := f.run(t, []string{"LD_LIBRARY_PATH=" + f.ours}, args...)
		if strings.Contains(out, ours) || !strings.Contains(out, "version -1 from "+decoy) || !strings.Contains(errOut, "decoy") {
			t.Fatalf("without the auditor %v: want the decoy (DT_RPATH before LD_LIBRARY_PATH), got:\n%s%s", args, out, errOut)
		}
	}
	for _, args := range modes {
		out, errOut := f.run(t, f.audited(), args...)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if want := min(len(args), 1) + 1; len(lines) != want {
			t.Fatalf("rpath_probe %v: %q", args, out)
		}
		for _, l := range lines {
			if !strings.HasSuffix(l, "version 13000 from "+ours) {
				t.Errorf("audited %v: %q, want gpucloud's runtime %s", args, l, ours)
			}
		}
		if strings.Contains(errOut, "decoy") {
			t.Errorf("audited %v: the decoy was loaded:\n%s", args, errOut)
		}
		out, errOut = f.run(t, f.audited("GPUCLOUD_NATIVE=1"), args...)
		if strings.Contains(out, ours) || !strings.Contains(out, "version -1 from "+decoy) || !strings.Contains(errOut, "decoy") {
			t.Errorf("opted out %v: want the decoy, got:\n%s%s", args, out, errOut)
		}
	}
}

// TestGpucloudInfo: gpucloud-info tells, for a running process and for a command, which
// libcudart it uses and whether it is gpucloud's, and says so in its exit status.
func TestGpucloudInfo(t *testing.T) {
	f := buildLoader(t)
	info := "../loader/gpucloud-info"
	env := []string{"PATH=" + os.Getenv("PATH"), "GPUCLOUD_LIBDIR=" + f.ours, "GPUCLOUD_AUDIT=" + f.audit}

	for _, native := range []bool{false, true} {
		penv := f.audited()
		if native {
			penv = append(penv, "GPUCLOUD_NATIVE=1")
		}
		cmd := exec.Command(f.probe, "wait")
		cmd.Env = penv
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if _, err := bufio.NewReader(stdout).ReadString('\n'); err != nil { // loaded and waiting
			t.Fatal(err)
		}
		ic := exec.Command(info, strconv.Itoa(cmd.Process.Pid))
		ic.Env = env
		out, err := ic.CombinedOutput()
		stdin.Close()
		cmd.Wait()
		var exit *exec.ExitError
		switch {
		case !native && (err != nil || !strings.Contains(string(out), "gpucloud  libcudart.so.13")):
			t.Errorf("gpucloud-info PID (audited): %v\n%s", err, out)
		case native && (!errors.As(err, &exit) || exit.ExitCode() != 3 || !strings.Contains(string(out), "OTHER     libcudart.so.13") ||
			!strings.Contains(string(out), "opted out")):
			t.Errorf("gpucloud-info PID (opted out): want exit 3 naming the other library, got %v\n%s", err, out)
		}
	}

	// Command form: the dlopen'ed library's dependency counts too; the command's status is kept.
	ic := exec.Command(info, "--", f.probe, f.ext)
	ic.Env = env
	out, err := ic.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "redirect libcudart.so.13 -> "+filepath.Join(f.ours, "libcudart.so.13")) ||
		!strings.Contains(string(out), "gpucloud  libcudart.so.13") || strings.Contains(string(out), "OTHER") {
		t.Errorf("gpucloud-info COMMAND: %v\n%s", err, out)
	}
	ic = exec.Command(info, f.probe, "/nonexistent.so")
	ic.Env = env
	if out, err := ic.CombinedOutput(); !errors.As(err, new(*exec.ExitError)) {
		t.Errorf("gpucloud-info of a failing command: want its failure, got %v\n%s", err, out)
	}
	ic = exec.Command(info, "999999999")
	ic.Env = env
	if out, err := ic.CombinedOutput(); !errors.As(err, new(*exec.ExitError)) || !strings.Contains(string(out), "cannot read") {
		t.Errorf("gpucloud-info of no process: want a clear error, got %v\n%s", err, out)
	}
}

// TestGuestImageInstallsLoader: the guest image's step (deploy/guest-image/install-loader.sh)
// installs the auditor and gpucloud-info and names the auditor once in the environment of
// logins and of systemd's units, however often it runs; a folder that is no root is refused.
func TestGuestImageInstallsLoader(t *testing.T) {
	f := buildLoader(t)
	root := t.TempDir()
	script := "../../../deploy/guest-image/install-loader.sh"
	if out, err := exec.Command(script, t.TempDir(), f.audit).CombinedOutput(); err == nil {
		t.Fatalf("install-loader.sh into a folder without etc/: want a refusal, got:\n%s", out)
	}
	// build.sh checks -a's file before anything else (it needs root for the rest).
	out, err := exec.Command("../../../deploy/guest-image/build.sh", "-l", filepath.Join(f.ours, "libcuda.so.1"), "-o", t.TempDir(), "-a", "/nonexistent/audit.so").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "auditor /nonexistent/audit.so not found") {
		t.Errorf("build.sh -a with no such file: want a refusal naming it, got %v\n%s", err, out)
	}
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(root, "etc", "environment"), []byte("LANG=C.UTF-8\n"), 0o644)
	for range 2 {
		if out, err := exec.Command(script, root, f.audit).CombinedOutput(); err != nil {
			t.Fatalf("install-loader.sh: %v\n%s", err, out)
		}
	}
	const lib = "/usr/lib/gpucloud/libgpucloud-audit.so"
	for _, p := range []string{lib, "/usr/local/bin/gpucloud-info"} {
		if st, err := os.Stat(root + p); err != nil || st.Mode()&0o111 == 0 {
			t.Errorf("%s: not installed executable: %v", p, err)
		}
	}
	env, _ := os.ReadFile(filepath.Join(root, "etc", "environment"))
	if string(env) != "LANG=C.UTF-8\nLD_AUDIT="+lib+"\n" {
		t.Errorf("/etc/environment:\n%s", env)
	}
	for _, d := range []string{"system.conf.d", "user.conf.d"} {
		b, _ := os.ReadFile(filepath.Join(root, "etc", "systemd", d, "50-gpucloud-audit.conf"))
		if !strings.Contains(string(b), `DefaultEnvironment="LD_AUDIT=`+lib+`"`) {
			t.Errorf("%s: %q", d, b)
		}
	}
}
