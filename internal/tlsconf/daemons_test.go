package tlsconf_test

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gpucloud/api"
	"gpucloud/apiserver/app"
	"gpucloud/apiserver/store"
	"gpucloud/hostd/controlplane"
	"gpucloud/internal/authn"
	"gpucloud/internal/pgtest"
	"gpucloud/internal/tlsconf"
	"gpucloud/internal/tlsconf/tlstest"
	"gpucloud/sdk"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// tlsAPIServer runs the apiserver as `apiserver serve --tls-cert --tls-key` does, on a fresh
// database, and returns its https URL, the operator's key and the token public key.
func tlsAPIServer(t *testing.T, certFile, keyFile string) (url, operatorKey string, pub ed25519.PublicKey) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := store.Open(ctx, pgtest.NewDatabase(t), 10)
	if err != nil {
		t.Fatal(err)
	}
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tln, err := tlsconf.Listen(ln, certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- app.Serve(ctx, app.Config{Listener: tln, Store: st, TokenKey: key}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("apiserver: %v", err)
		}
		st.Close()
	})
	_, operatorKey, err = app.Bootstrap(ctx, st, "op@example.com", authn.RoleOperator)
	if err != nil {
		t.Fatal(err)
	}
	return "https://" + ln.Addr().String(), operatorKey, pub
}

func TestDaemonsHeartbeatOverTLSAndRefuseOtherCAs(t *testing.T) {
	ctx := context.Background()
	ca, other := tlstest.NewCA(t, "gpucloud test CA"), tlstest.NewCA(t, "someone else's CA")
	cert, key := ca.Issue(t, "apiserver")
	url, opKey, pub := tlsAPIServer(t, cert, key)

	// The SDK (and so gpuctl) trusts the private CA through Options.CAFile.
	op, err := sdk.New(url, opKey, sdk.Options{CAFile: ca.File})
	if err != nil {
		t.Fatal(err)
	}
	host, err := op.CreateHost(ctx, "vmhost-1")
	if err != nil {
		t.Fatalf("operator over TLS: %v", err)
	}

	// hostd's control-plane client, built as cmd/hostd builds it with -ca-file.
	hc, err := tlsconf.Client(ca.File, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := controlplane.NewHTTPClient(url, host.Credential, hc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Heartbeat(ctx, api.HostReport{Hostname: "vmhost-1", Hypervisor: "test:///default",
		Capacity: api.HostCapacity{VCPUs: 8, MemoryMiB: 32768, DiskGiB: 100}}); err != nil {
		t.Fatalf("hostd heartbeat over TLS: %v", err)
	}
	h, err := op.GetHost(ctx, host.ID)
	if err != nil || h.LastHeartbeatAt == nil {
		t.Fatalf("the apiserver did not record hostd's heartbeat: %+v %v", h, err)
	}

	// The same clients trusting another CA (or the system roots) refuse the server, and the
	// apiserver sees nothing from them.
	for name, caFile := range map[string]string{"other CA": other.File, "system roots": ""} {
		bad, err := tlsconf.Client(caFile, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		badCP, _ := controlplane.NewHTTPClient(url, host.Credential, bad)
		_, err = badCP.Heartbeat(ctx, api.HostReport{Hostname: "vmhost-1"})
		if err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("%s: hostd heartbeat to an untrusted server: %v, want a certificate error", name, err)
		}
		badSDK, err := sdk.New(url, opKey, sdk.Options{CAFile: caFile, Retry: sdk.RetryPolicy{MaxAttempts: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := badSDK.CreateHost(ctx, "never"); err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("%s: SDK against an untrusted server: %v, want a certificate error", name, err)
		}
	}
	for h, err := range op.Hosts(ctx) {
		if err != nil || h.Name == "never" {
			t.Fatalf("a refused client created a host: %+v %v", h, err)
		}
	}

	// gpuserverd, a real process, heartbeats over TLS with --ca-file.
	gs, err := op.CreateGPUServer(ctx, "gpu-1")
	if err != nil {
		t.Fatal(err)
	}
	bin := buildDaemons(t)
	proc := exec.Command(filepath.Join(bin, "gpuserverd"), "--id", gs.ID, "--public-key", base64.StdEncoding.EncodeToString(pub),
		"--backend", "simulated", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0",
		"--data-dir", t.TempDir(), "--advertise", "127.0.0.1:7070")
	// Settings through the environment, as the systemd unit's EnvironmentFile gives them.
	proc.Env = append(os.Environ(), "GPUSERVERD_APISERVER="+url, "GPUSERVERD_CREDENTIAL="+gs.Credential, "GPUSERVERD_CA_FILE="+ca.File)
	out, _ := proc.StdoutPipe()
	proc.Stderr = os.Stderr
	if err := proc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proc.Process.Signal(os.Interrupt); proc.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || !strings.HasPrefix(line, "listening") {
		t.Fatalf("gpuserverd did not start: %q %v", line, err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		g, err := op.GetGPUServer(ctx, gs.ID)
		if err == nil && g.LastHeartbeatAt != nil {
			if g.Backend != "simulated" || g.Endpoint != "127.0.0.1:7070" {
				t.Fatalf("gpuserverd's heartbeat recorded as %+v", g)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gpuserverd never heartbeated over TLS: %+v %v", g, err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// hostd, a real process on libvirt's test driver, heartbeats over TLS with HOSTD_CA_FILE.
	host2, err := op.CreateHost(ctx, "vmhost-2")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	node := filepath.Join(dir, "node.xml")
	os.WriteFile(node, []byte("<node></node>\n"), 0o644)
	hostd := exec.Command(filepath.Join(bin, "hostd"), "-interval", "1s", "-listen", "127.0.0.1:0")
	hostd.Env = append(os.Environ(), "HOSTD_APISERVER="+url, "HOSTD_CREDENTIAL="+host2.Credential, "HOSTD_CA_FILE="+ca.File,
		"HOSTD_LIBVIRT_URI=test://"+node, "HOSTD_DATA_DIR="+filepath.Join(dir, "data"), "HOSTD_SYSFS_ROOT="+filepath.Join(dir, "sys"))
	var logs strings.Builder
	hostd.Stdout, hostd.Stderr = &logs, &logs
	if err := hostd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hostd.Process.Signal(os.Interrupt); hostd.Wait() })
	deadline = time.Now().Add(30 * time.Second)
	for {
		h, err := op.GetHost(ctx, host2.ID)
		if err == nil && h.LastHeartbeatAt != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("hostd never heartbeated over TLS: %+v %v\n%s", h, err, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// buildDaemons builds hostd and gpuserverd into a folder and returns it.
func buildDaemons(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("go", "build", "-o", dir+"/", "gpucloud/cmd/gpuserverd", "gpucloud/cmd/hostd").CombinedOutput(); err != nil {
		t.Fatalf("build the daemons: %v\n%s", err, out)
	}
	return dir
}
