package controlplane_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"gpucloud/api"
	"gpucloud/hostd/controlplane"
	"gpucloud/hostd/controlplane/cpfake"
)

func TestClientAgainstFake(t *testing.T) {
	ctx := context.Background()
	cp := cpfake.New(t, "good")
	c := cp.Client(t)
	ack, err := c.Heartbeat(ctx, api.HostReport{Hostname: "h1", Capacity: api.HostCapacity{VCPUs: 4}})
	if err != nil || ack.HostID != "host-h1" || ack.HeartbeatPeriod != 10*time.Second {
		t.Fatalf("heartbeat %+v %v", ack, err)
	}
	cp.Put(api.DesiredInstance{ID: "i1", TenantID: "t", DesiredState: api.DesiredRunning})
	list, err := c.DesiredInstances(ctx)
	if err != nil || len(list.Instances) != 1 || list.Instances[0].ID != "i1" {
		t.Fatalf("list %+v %v", list, err)
	}
	if err := c.ReportInstance(ctx, "i1", api.InstanceObserved{State: api.ObservedRunning}); err != nil {
		t.Fatal(err)
	}
	tok, err := c.RenewToken(ctx, "i1")
	if err != nil || tok.Token != "tok-i1-r1" || time.Until(tok.ExpiresAt) < 50*time.Minute {
		t.Fatalf("renew %+v %v", tok, err)
	}
	res, err := c.PushUsage(ctx, api.UsageBatch{Records: []api.UsageRecord{
		{ID: "h/i1/1", Kind: api.UsageVM, Start: time.Unix(0, 0), End: time.Unix(60, 0)},
		{ID: "h/i1/1", Kind: api.UsageVM, Start: time.Unix(0, 0), End: time.Unix(60, 0)},
		{ID: "h/i1/2", Kind: api.UsageGPU},
	}})
	if err != nil || res.Accepted != 1 || res.Duplicates != 1 || len(res.Rejected) != 1 || res.Rejected[0].Index != 2 {
		t.Fatalf("usage %+v %v", res, err)
	}
	// An instance the apiserver does not know: a 404 the caller can tell apart.
	err = c.ReportInstance(ctx, "nope", api.InstanceObserved{State: api.ObservedRunning})
	if !controlplane.IsNotFound(err) || !strings.Contains(err.Error(), "no instance nope") {
		t.Fatalf("unknown instance: %v", err)
	}
	// A state outside the contract is refused by the server, with its reason.
	err = c.ReportInstance(ctx, "i1", api.InstanceObserved{State: "exploded"})
	if err == nil || !strings.Contains(err.Error(), "422") || !strings.Contains(err.Error(), "exploded") {
		t.Fatalf("bad state: %v", err)
	}
}

func TestClientErrors(t *testing.T) {
	cp := cpfake.New(t, "good")
	bad, err := controlplane.NewHTTP(cp.URL(), "wrong")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bad.DesiredInstances(context.Background()); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("wrong credential: %v", err)
	}
	for _, u := range []string{"", "ftp://x", "http://", "::"} {
		if _, err := controlplane.NewHTTP(u, "c"); err == nil {
			t.Errorf("URL %q accepted", u)
		}
	}
	if _, err := controlplane.NewHTTP("http://x", ""); err == nil {
		t.Error("empty credential accepted")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := cp.Client(t).DesiredInstances(ctx); err == nil || !strings.Contains(err.Error(), "canceled") {
		t.Fatalf("cancelled context: %v", err)
	}
}

func TestClientRejectsMalformedAnswer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte(`{"instances": [{"id": 42}]}`))
	}))
	defer srv.Close()
	c, err := controlplane.NewHTTP(srv.URL, "c")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.DesiredInstances(context.Background())
	if err == nil || !strings.Contains(err.Error(), "decode answer to GET /v1/agent/host/instances") {
		t.Fatalf("malformed answer: %v", err)
	}
}
