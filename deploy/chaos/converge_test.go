package chaos

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"gpucloud/sdk"
)

// converge gives the platform up to 60 s, daemons untouched, to settle, then returns what is
// still wrong (nothing, when it converged).
func (p *platform) converge(ctx context.Context, t *testing.T, keepers []string) []string {
	var problems []string
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		if problems = p.check(ctx, t, keepers); len(problems) == 0 {
			return nil
		}
	}
	return problems
}

// check compares the API's view with the daemons' and billing's, once.
func (p *platform) check(ctx context.Context, t *testing.T, keepers []string) []string {
	var bad []string
	badf := func(format string, a ...any) { bad = append(bad, fmt.Sprintf(format, a...)) }

	// The API's instances: one per name, whatever the retries; the live ones are the keepers.
	rows, err := p.st.Pool.Query(ctx, `SELECT id::text, name, state, vcpus FROM instances`)
	if err != nil {
		t.Fatal(err)
	}
	live := map[string]string{} // id -> API state
	names := map[string]int{}
	liveVCPUs := 0
	for rows.Next() {
		var id, name, state string
		var vcpus int
		if err := rows.Scan(&id, &name, &state, &vcpus); err != nil {
			t.Fatal(err)
		}
		names[name]++
		if state != sdk.StateDeleted {
			live[id] = state
			liveVCPUs += vcpus
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for name, n := range names {
		if n != 1 {
			badf("%d instances named %s: a retried create made a second VM", n, name)
		}
	}
	for _, k := range keepers {
		if live[k] != sdk.StateRunning {
			badf("keeper %s is %q in the API, want running", k, live[k])
		}
	}
	if len(live) != len(keepers) {
		badf("API lists %d live instances, want the %d keepers: %v", len(live), len(keepers), live)
	}

	// What hostd has in libvirt, from its hostd_domain metric, against the API.
	doms, err := p.hostdDomains()
	if err != nil {
		badf("hostd metrics: %v", err)
	}
	for id, st := range doms {
		if _, ok := live[id]; !ok {
			badf("hostd runs domain %s (%s), which the API does not list as live", id, st)
		}
	}
	for id, st := range live {
		if want := map[string]string{sdk.StateRunning: "running", sdk.StateStopped: "stopped"}[st]; doms[id] != want {
			badf("instance %s is %s in the API, its domain is %q", id, st, doms[id])
		}
	}

	// Seeds, disks and VF claims on the host only for live instances.
	ents, _ := os.ReadDir(filepath.Join(p.hostData, "instances"))
	for _, e := range ents {
		if _, ok := live[e.Name()]; !ok {
			badf("hostd keeps files (seed, disk) of dead instance %s", e.Name())
		}
	}
	claims, _ := filepath.Glob(filepath.Join(p.hostData, "vfs", "*.claim"))
	if len(claims) > 0 {
		badf("VF claims on a host without VFs: %v", claims)
	}

	// GPU reservations and host room only for live instances, and the counters agree.
	var orphanRes, reserved, resBytes int64
	if err := p.st.Pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM gpu_reservations r JOIN instances i ON i.id = r.instance_id WHERE i.state = 'deleted'),
		(SELECT coalesce(sum(reserved_bytes), 0) FROM gpus),
		(SELECT coalesce(sum(bytes), 0) FROM gpu_reservations)`).Scan(&orphanRes, &reserved, &resBytes); err != nil {
		t.Fatal(err)
	}
	if orphanRes != 0 || reserved != resBytes {
		badf("GPU reservations: %d of deleted instances; GPUs say %d bytes reserved, reservations hold %d", orphanRes, reserved, resBytes)
	}
	if h, err := p.op.GetHost(ctx, p.hostID); err != nil || h.UsedVCPUs != liveVCPUs {
		badf("host uses %d vCPUs, live instances hold %d (%v)", h.UsedVCPUs, liveVCPUs, err)
	}

	// Each gpuserverd: no session (no guest runs now), no worker process: none left unadopted by
	// a kill or behind a move.
	for _, g := range []struct{ data, admin string }{{p.gsData, p.gsAdmin}, {p.gs2Data, p.gs2Admin}} {
		if n, err := gsSessions(g.data, g.admin); err != nil || n != 0 {
			badf("gpuserverd (%s) serves %d sessions (%v)", g.admin, n, err)
		}
	}
	if pids, want := processesOf(filepath.Join(p.bin, "gpuserverd")), []int{p.gs.pid(), p.gs2.pid()}; !sameSet(pids, want) {
		badf("gpuserverd processes %v, want only the daemons %v: a worker outlived its session or its gpuserverd", pids, want)
	}

	// Billing: every record each gpuserverd logged, exactly once, and none it did not log.
	for _, g := range []struct{ id, data string }{{p.gsID, p.gsData}, {p.gs2ID, p.gs2Data}} {
		logged := p.usageLog(t, g.data)
		var billed []string
		rows, err = p.st.Pool.Query(ctx, `SELECT id FROM billing_usage_records WHERE source = $1 ORDER BY id`, g.id)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			billed = append(billed, id)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		sort.Strings(logged)
		if !slices.Equal(logged, billed) {
			badf("gpuserverd %s logged %d usage records, billing holds %d of its: missing %v, unknown %v",
				g.id, len(logged), len(billed), minus(logged, billed), minus(billed, logged))
		}
	}
	// The same time of one instance billed under two ids is double billing too.
	var overlaps []string
	rows, err = p.st.Pool.Query(ctx, `SELECT a.id || ' [' || a.start_at || ', ' || a.end_at || '] and ' || b.id || ' [' || b.start_at || ', ' || b.end_at || ']'
		FROM billing_usage_records a JOIN billing_usage_records b
		ON a.instance_id = b.instance_id AND a.kind = b.kind AND a.id < b.id
		AND a.start_at < b.end_at AND b.start_at < a.end_at`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var pair string
		if err := rows.Scan(&pair); err != nil {
			t.Fatal(err)
		}
		overlaps = append(overlaps, pair)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(overlaps) != 0 {
		badf("%d pairs of usage records bill the same instance for the same time: %v", len(overlaps), overlaps)
	}
	// Charges: held time equals the recorded running time, to the second, for every instance.
	for _, m := range p.heldTimeMismatches(ctx, t) {
		badf("%s", m)
	}
	return bad
}

// missingVMWindows counts, per keeper, the minutes it ran (from its first running event to now)
// that billing holds no VM record of. hostd bills every minute a VM is seen running; its queue of
// unsent records lives in memory, so a hostd killed while the apiserver was down loses them.
func (p *platform) missingVMWindows(ctx context.Context, t *testing.T, keepers []string) map[string]int {
	out := map[string]int{}
	for _, k := range keepers {
		var missing int
		if err := p.st.Pool.QueryRow(ctx, `SELECT count(*) FROM generate_series(
			date_trunc('minute', (SELECT min(at) FROM instance_events WHERE instance_id = $1::uuid AND to_state = 'running')),
			date_trunc('minute', now()) - interval '1 minute', interval '1 minute') w
			WHERE NOT EXISTS (SELECT 1 FROM billing_usage_records r WHERE r.kind = 'vm' AND r.instance_id = $1::text AND r.start_at = w)`,
			k).Scan(&missing); err != nil {
			t.Fatal(err)
		}
		out[k] = missing
	}
	return out
}

// sameSet says whether a and b hold the same numbers, in any order.
func sameSet(a, b []int) bool {
	return len(a) == len(b) && !slices.ContainsFunc(a, func(x int) bool { return !slices.Contains(b, x) })
}

func minus(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

// hostdDomains reads hostd's hostd_domain series: instance id -> domain state.
func (p *platform) hostdDomains() (map[string]string, error) {
	body, err := get("http://"+p.hostdMetrics+"/metrics", "")
	if err != nil {
		return nil, err
	}
	doms := map[string]string{}
	for _, l := range strings.Split(body, "\n") {
		var id, st string
		if _, err := fmt.Sscanf(strings.NewReplacer(`"`, " ", ",", " ", "}", " ").Replace(l), "hostd_domain{instance= %s state= %s", &id, &st); err == nil {
			doms[id] = st
		}
	}
	return doms, nil
}

func gsSessions(data, admin string) (int, error) {
	tok, err := os.ReadFile(filepath.Join(data, "admin-token")) // gpuserverd's generated admin token
	if err != nil {
		return -1, err
	}
	body, err := get("http://"+admin+"/metrics", "Bearer "+strings.TrimSpace(string(tok)))
	if err != nil {
		return -1, err
	}
	for _, l := range strings.Split(body, "\n") {
		var n int
		if _, err := fmt.Sscanf(l, "gpuserverd_sessions_active %d", &n); err == nil {
			return n, nil
		}
	}
	return -1, fmt.Errorf("no gpuserverd_sessions_active in /metrics")
}

// get fetches url, with the Authorization header auth unless it is "".
func get(url, auth string) (string, error) {
	c := http.Client{Timeout: 5 * time.Second}
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// guestHold is how long golden.c holds its session; checkpointPeriod is gpuserverd's
// --checkpoint-period here, the most GPU time a gpuserverd kill may lose of a session.
const (
	guestHold        = 300 * time.Millisecond
	checkpointPeriod = 100 * time.Millisecond
)

// gpuSeconds is the GPU time billing holds for an instance.
func (p *platform) gpuSeconds(ctx context.Context, t *testing.T, id string) time.Duration {
	var secs float64
	if err := p.st.Pool.QueryRow(ctx, `SELECT coalesce(sum(extract(epoch FROM end_at - start_at)), 0)::float8
		FROM billing_usage_records WHERE kind = 'gpu' AND instance_id = $1::text`, id).Scan(&secs); err != nil {
		t.Fatal(err)
	}
	return time.Duration(secs * float64(time.Second))
}

// gpuTimeLost names the sessions that ran to their end yet are billed less than the guest held
// them minus one checkpoint period (a kill just after the guest's end may cut the last interval).
func (p *platform) gpuTimeLost(ctx context.Context, t *testing.T, ids []string) map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, id := range ids {
		if d := p.gpuSeconds(ctx, t, id); d < guestHold-checkpointPeriod {
			out[id] = d
		}
	}
	return out
}

// billedSome counts the instances billed any GPU time.
func (p *platform) billedSome(ctx context.Context, t *testing.T, ids []string) int {
	n := 0
	for _, id := range ids {
		if p.gpuSeconds(ctx, t, id) > 0 {
			n++
		}
	}
	return n
}
