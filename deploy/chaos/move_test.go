package chaos

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Drains that move work during the chaos (issue 18): a mover keeps a guest program running on a
// keeper VM and drains, with move, the GPU server the keeper is on, while the cycles create and
// delete VMs and the daemons are killed around it. Every drain must move the keeper to the other
// server with its program running on to a correct end, unless a kill of a gpuserverd cut it
// (counted, as the cycles count theirs); billing's checks at the end hold both servers' records
// once, with no instance's time billed twice.

// moveStats is what the mover did.
type moveStats struct {
	drains, moved, failedMoves, steadyOK, steadyCut int
}

// steadyArgs: about 4 s of guest work (iterations, pause in ms), long enough for a drain.
var steadyArgs = []string{"120", "25"}

// mover drains the keeper's GPU server with move, round after round, until stop closes.
func (p *platform) mover(ctx context.Context, t *testing.T, keeper string, stop <-chan struct{}) moveStats {
	var st moveStats
	for {
		select {
		case <-stop:
			return st
		case <-time.After(500 * time.Millisecond):
		}
		inst, err := p.tenant.GetInstance(ctx, keeper)
		if err != nil || inst.GPUServerID == "" {
			continue
		}
		from := inst.GPUServerID
		conf, err := p.confFor(keeper, p.endpointOf(from))
		if err != nil {
			t.Logf("mover: %v (trying again)", err)
			continue
		}
		serving(p.endpointOf(from)) // a just-restarted gpuserverd may not listen yet
		epochs := p.gs.epoch.Load() + p.gs2.epoch.Load()
		prog, out, err := p.startSteady(conf)
		if err != nil {
			os.Remove(conf)
			if p.gs.epoch.Load()+p.gs2.epoch.Load() == epochs && epochs%2 == 0 {
				t.Errorf("mover: steady did not start while both gpuserverd ran: %v", err)
			}
			continue
		}
		st.drains++
		dctx, cancel := context.WithTimeout(ctx, 40*time.Second)
		d, derr := p.op.MoveDrainGPUServer(dctx, from, 200*time.Millisecond, nil)
		cancel()
		for _, m := range d.Moves {
			switch {
			case m.InstanceID == keeper && m.State == "done":
				st.moved++
			case m.InstanceID == keeper:
				st.failedMoves++
				t.Logf("mover: the keeper's move from %s is %s: %s", from, m.State, m.Reason)
			}
		}
		if derr != nil {
			t.Logf("mover: drain of %s: %v", from, derr)
		}
		if _, err := p.op.UncordonGPUServer(ctx, from); err != nil {
			t.Errorf("mover: uncordon %s: %v", from, err)
		}
		res := waitSteady(prog, out)
		os.Remove(conf)
		switch {
		case res == nil:
			st.steadyOK++
		case p.gs.epoch.Load()+p.gs2.epoch.Load() != epochs:
			st.steadyCut++
			t.Logf("mover: the keeper's program cut by a gpuserverd kill: %v", res)
		default:
			t.Errorf("mover: the keeper's program failed across a drain of %s with both gpuserverd running: %v", from, res)
		}
	}
}

// endpointOf is where the guests of GPU server id dial.
func (p *platform) endpointOf(id string) string {
	if id == p.gs2ID {
		return p.gs2EP
	}
	return p.gsEP
}

// confFor writes the keeper's guest.conf, as hostd seeds it, once it names endpoint (hostd
// rewrites the seed when a move changes the VM's GPU server).
func (p *platform) confFor(id, endpoint string) (string, error) {
	iso := filepath.Join(p.hostData, "instances", id, "seed.iso")
	var conf []byte
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		var err error
		conf, err = exec.Command("isoinfo", "-R", "-i", iso, "-x", "/gpucloud/guest.conf").Output()
		if err == nil && strings.Contains(string(conf), endpoint) {
			break
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("the seed of %s does not name %s after 15 s: %v %q", id, endpoint, err, conf)
		}
	}
	f := filepath.Join(os.TempDir(), "chaos-steady-"+id+".conf")
	return f, os.WriteFile(f, conf, 0o600)
}

// startSteady starts the guest program with conf and waits until its first iteration is done.
func (p *platform) startSteady(conf string) (*exec.Cmd, *bufio.Reader, error) {
	cmd := exec.Command(filepath.Join(p.bin, "steady"), steadyArgs...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "LD_LIBRARY_PATH=" + p.bin, "GPUCLOUD_CONFIG=" + conf}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	out := bufio.NewReader(pipe)
	line, err := out.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "STEADY RUNNING") {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, nil, fmt.Errorf("steady: %q %v: %s", line, err, stderr.String())
	}
	return cmd, out, nil
}

// waitSteady waits (up to 60 s) for the program's correct end.
func waitSteady(cmd *exec.Cmd, out *bufio.Reader) error {
	timer := time.AfterFunc(60*time.Second, func() { cmd.Process.Kill() })
	defer timer.Stop()
	var rest strings.Builder
	for {
		line, err := out.ReadString('\n')
		rest.WriteString(line)
		if err != nil {
			break
		}
	}
	werr := cmd.Wait()
	if werr != nil || !strings.Contains(rest.String(), "STEADY OK "+steadyArgs[0]) {
		return fmt.Errorf("%v: %q", werr, strings.TrimSpace(rest.String()))
	}
	return nil
}
