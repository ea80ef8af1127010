package systemd

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gpucloud/internal/flagdoc"
)

// unit is a parsed unit file: section -> key -> values in order (a key may repeat).
type unit map[string]map[string][]string

func parseUnit(t *testing.T, path string) unit {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u, section := unit{}, ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: not key=value in a section: %q", path, n, line)
			}
			u[section][k] = append(u[section][k], v)
		}
	}
	return u
}

func (u unit) last(key string) string {
	v := u["Service"][key]
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

// Hardening every daemon has, whatever it runs as.
var common = map[string]string{
	"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
	"ProtectKernelModules": "yes", "ProtectKernelLogs": "yes", "ProtectControlGroups": "yes",
	"RestrictNamespaces": "yes", "RestrictSUIDSGID": "yes", "RestrictRealtime": "yes",
	"LockPersonality": "yes", "SystemCallArchitectures": "native", "Restart": "on-failure",
	"AmbientCapabilities": "",
}

func TestUnitsAreHardened(t *testing.T) {
	cases := []struct {
		daemon, user string
		caps         string // CapabilityBoundingSet
		families     []string
		extra        map[string]string
	}{
		{"apiserver", "dynamic", "", []string{"AF_INET", "AF_INET6", "AF_UNIX"},
			map[string]string{"PrivateDevices": "yes", "ProtectKernelTunables": "yes", "MemoryDenyWriteExecute": "yes", "PrivateUsers": "yes"}},
		{"gpuserverd", "dynamic", "", []string{"AF_INET", "AF_INET6", "AF_UNIX", "AF_NETLINK"},
			// KillMode=process: sessions' workers outlive a restart of the daemon (issue 18).
			map[string]string{"DevicePolicy": "closed", "ProtectKernelTunables": "yes", "StateDirectory": "gpuserverd",
				"KillMode": "process", "ExecStart": "/usr/local/bin/gpucloud-gpuserverd --keep-sessions-on-stop"}},
		{"hostd", "root", "CAP_NET_ADMIN", []string{"AF_INET", "AF_INET6", "AF_UNIX", "AF_NETLINK"},
			map[string]string{"PrivateDevices": "yes", "MemoryDenyWriteExecute": "yes", "StateDirectory": "gpucloud/hostd"}},
	}
	for _, tc := range cases {
		t.Run(tc.daemon, func(t *testing.T) {
			u := parseUnit(t, "gpucloud-"+tc.daemon+".service")
			for k, want := range common {
				if got, ok := u["Service"][k]; !ok || u.last(k) != want {
					t.Errorf("%s=%q (set: %v), want %q", k, u.last(k), got != nil, want)
				}
			}
			for k, want := range tc.extra {
				if got := u.last(k); got != want {
					t.Errorf("%s=%q, want %q", k, got, want)
				}
			}
			if vs, ok := u["Service"]["CapabilityBoundingSet"]; !ok || strings.Join(vs, " ") != tc.caps {
				t.Errorf("CapabilityBoundingSet %q, want exactly %q", vs, tc.caps)
			}
			switch tc.user {
			case "dynamic":
				if u.last("DynamicUser") != "yes" {
					t.Error("want DynamicUser=yes")
				}
			case "root":
				if u.last("User") != "root" || u.last("DynamicUser") == "yes" {
					t.Error("want User=root, said out loud")
				}
			}
			fams := strings.Fields(u.last("RestrictAddressFamilies"))
			slices.Sort(fams)
			want := slices.Clone(tc.families)
			slices.Sort(want)
			if !slices.Equal(fams, want) {
				t.Errorf("RestrictAddressFamilies %v, want %v", fams, want)
			}
			if sc := u["Service"]["SystemCallFilter"]; !slices.Contains(sc, "@system-service") || !slices.Contains(sc, "~@privileged") {
				t.Errorf("SystemCallFilter %v: want @system-service and ~@privileged", sc)
			}
			if got := u.last("EnvironmentFile"); got != "/etc/gpucloud/"+tc.daemon+".env" {
				t.Errorf("EnvironmentFile %q", got)
			}
			if got := u.last("ExecStart"); !strings.HasPrefix(got, "/usr/local/bin/gpucloud-"+tc.daemon) {
				t.Errorf("ExecStart %q", got)
			}
			if u["Install"]["WantedBy"] == nil {
				t.Error("no [Install] WantedBy")
			}
		})
	}
	if got := parseUnit(t, "gpucloud-apiserver.service").last("ExecStartPre"); got != "/usr/local/bin/gpucloud-apiserver migrate" {
		t.Errorf("apiserver ExecStartPre %q, want the migration", got)
	}
}

// TestEnvironmentFilesNameRealSettings checks that each example environment file sets only
// variables docs/configuration.md documents (so a typo or a removed setting is caught).
func TestEnvironmentFilesNameRealSettings(t *testing.T) {
	documented := flagdoc.Documented(t)
	for _, d := range []string{"apiserver", "hostd", "gpuserverd"} {
		raw, err := os.ReadFile(d + ".env")
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for i, line := range strings.Split(string(raw), "\n") {
			line = strings.TrimPrefix(strings.TrimSpace(line), "#")
			k, _, ok := strings.Cut(line, "=")
			if !ok || strings.ContainsAny(k, " \t") || k == "" {
				continue
			}
			n++
			if !documented[k] {
				t.Errorf("%s.env:%d sets %s, which docs/configuration.md does not document", d, i+1, k)
			}
		}
		if n == 0 {
			t.Errorf("%s.env sets nothing", d)
		}
	}
}

// TestSystemdAnalyzeVerify runs systemd's own checker (unknown keys, bad values, bad
// specifiers). It needs the binaries to exist, so it verifies copies whose Exec lines point at
// placeholder executables of the same names; nothing else is changed.
func TestSystemdAnalyzeVerify(t *testing.T) {
	tool, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed (Debian package systemd)")
	}
	args := placeholderCopies(t)
	out, err := exec.Command(tool, append([]string{"verify", "--man=no"}, args...)...).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestExposure keeps systemd's own hardening score (0 best, 10 worst) where it was when the
// units were written (apiserver 1.4, gpuserverd 1.6, hostd 2.1 with systemd 252): a change
// that loosens a unit fails here.
func TestExposure(t *testing.T) {
	tool, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed (Debian package systemd)")
	}
	limits := map[string]string{"gpucloud-apiserver": "15", "gpucloud-gpuserverd": "17", "gpucloud-hostd": "22"}
	for _, u := range placeholderCopies(t) {
		name := strings.TrimSuffix(filepath.Base(u), ".service")
		out, err := exec.Command(tool, "security", "--offline=true", "--no-pager", "--threshold="+limits[name], u).CombinedOutput()
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if err != nil {
			t.Errorf("%s: exposure above %s/100: %v\n%s", name, limits[name], err, lines[len(lines)-1])
		}
	}
}

// placeholderCopies writes the units to a temporary folder with their Exec lines pointing at
// placeholder executables of the same names (systemd-analyze wants them to exist).
func placeholderCopies(t *testing.T) []string {
	t.Helper()
	dir := t.TempDir()
	units, _ := filepath.Glob("*.service")
	if len(units) != 3 {
		t.Fatalf("units %v, want 3", units)
	}
	var args []string
	for _, u := range units {
		raw, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		bin := filepath.Join(dir, "bin")
		os.MkdirAll(bin, 0o755)
		os.WriteFile(filepath.Join(bin, strings.TrimSuffix(u, ".service")), []byte("#!/bin/sh\n"), 0o755)
		out := strings.ReplaceAll(string(raw), "/usr/local/bin/", bin+"/")
		if err := os.WriteFile(filepath.Join(dir, u), []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, filepath.Join(dir, u))
	}
	return args
}

// TestVerifyCatchesMistakes guards the check above: a unit with an unknown key fails it.
func TestVerifyCatchesMistakes(t *testing.T) {
	tool, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed")
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "bad.service")
	os.WriteFile(p, []byte("[Service]\nExecStart=/bin/true\nProtectSystm=strict\n"), 0o644)
	out, _ := exec.Command(tool, "verify", "--man=no", p).CombinedOutput()
	if !strings.Contains(string(out), "ProtectSystm") {
		t.Fatalf("systemd-analyze did not flag an unknown key: %s", out)
	}
}
