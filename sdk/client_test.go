package sdk_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"gpucloud/sdk"
	"gpucloud/sdk/sdktest"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestAccountsAndErrors(t *testing.T) {
	ctx := ctxT(t)
	e := sdktest.New(t)
	op := e.OperatorClient
	me, err := op.Me(ctx)
	if err != nil || me.Role != sdk.RoleOperator || me.UserID == "" {
		t.Fatalf("me %+v %v", me, err)
	}
	ten, err := op.CreateTenant(ctx, sdk.CreateTenantRequest{Name: "acme", QuotaInstances: 3, QuotaGPUs: 2, QuotaGPUMemoryBytes: 1 << 40})
	if err != nil || ten.Name != "acme" || ten.QuotaGPUs != 2 {
		t.Fatalf("create tenant %+v %v", ten, err)
	}
	if ten, err = op.SetQuota(ctx, ten.ID, sdk.Quota{Instances: 5, GPUs: 4, GPUMemoryBytes: 1 << 41}); err != nil || ten.QuotaInstances != 5 {
		t.Fatalf("set quota %+v %v", ten, err)
	}

	// Validation names every bad field.
	_, err = op.CreateTenant(ctx, sdk.CreateTenantRequest{Name: "Bad Name", QuotaGPUs: -1})
	ae, ok := sdk.AsAPIError(err)
	if !sdk.IsValidation(err) || !ok || ae.Status != 400 || len(ae.Fields) != 2 || ae.Fields[0].Field != "name" || ae.RequestID == "" {
		t.Fatalf("validation error %#v", err)
	}
	// A duplicate is a conflict.
	if _, err := op.CreateTenant(ctx, sdk.CreateTenantRequest{Name: "acme"}); !sdk.IsConflict(err) {
		t.Fatalf("duplicate tenant: %v", err)
	}
	// Not found, for a bad id and for another tenant's tenant.
	if _, err := op.GetTenant(ctx, "00000000-0000-0000-0000-000000000001"); !sdk.IsNotFound(err) || !errors.Is(err, sdk.ErrNotFound) {
		t.Fatalf("missing tenant: %v", err)
	}
	adminA := e.Client(t, e.A.AdminKey)
	if _, err := adminA.GetTenant(ctx, e.B.ID); !sdk.IsNotFound(err) {
		t.Fatalf("tenant A reads tenant B: %v", err)
	}
	// Forbidden: a tenant admin may not list tenants or create them.
	if _, err := adminA.ListTenants(ctx, sdk.ListOptions{}); !sdk.IsForbidden(err) {
		t.Fatalf("tenant admin lists tenants: %v", err)
	}

	// Users and keys: a member with a key, which works until revoked.
	u, err := adminA.CreateUser(ctx, sdk.CreateUserRequest{Email: "dev@a.example", Role: sdk.RoleTenantMember, TenantID: e.A.ID})
	if err != nil || u.TenantID != e.A.ID {
		t.Fatalf("create user %+v %v", u, err)
	}
	if _, err := adminA.CreateUser(ctx, sdk.CreateUserRequest{Email: "x@b.example", Role: sdk.RoleTenantMember, TenantID: e.B.ID}); !sdk.IsValidation(err) {
		t.Fatalf("admin of A invites into B: %v", err)
	}
	k, err := adminA.CreateAPIKey(ctx, u.ID, "laptop")
	if err != nil || k.Secret == "" || k.Name != "laptop" {
		t.Fatalf("create key %+v %v", k, err)
	}
	member := e.Client(t, k.Secret)
	if me, err := member.Me(ctx); err != nil || me.UserID != u.ID || me.TenantID != e.A.ID {
		t.Fatalf("member me %+v %v", me, err)
	}
	keys, err := sdk.Collect(adminA.APIKeys(ctx, u.ID))
	if err != nil || len(keys) != 1 || keys[0].ID != k.ID {
		t.Fatalf("keys %+v %v", keys, err)
	}
	users, err := sdk.Collect(adminA.Users(ctx, ""))
	if err != nil || len(users) != 2 {
		t.Fatalf("tenant A users %+v %v", users, err)
	}
	if err := adminA.RevokeAPIKey(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := member.Me(ctx); !sdk.IsUnauthenticated(err) {
		t.Fatalf("revoked key: %v", err)
	}
	bad := e.Client(t, "gck_nonsense")
	if _, err := bad.Me(ctx); !sdk.IsUnauthenticated(err) || sdk.IsRetryable(err) {
		t.Fatalf("bad key: %v", err)
	}
	// The audit log saw the changes.
	var actions []string
	for a, err := range op.AuditEvents(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		actions = append(actions, a.Action)
	}
	if len(actions) < 5 {
		t.Fatalf("audit log %v", actions)
	}
}

func TestPagination(t *testing.T) {
	ctx := ctxT(t)
	e := sdktest.New(t)
	op := e.OperatorClient
	for _, n := range []string{"p1", "p2", "p3", "p4", "p5"} {
		if _, err := op.CreateTenant(ctx, sdk.CreateTenantRequest{Name: n}); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	pages := 0
	for cur := ""; ; pages++ {
		p, err := op.ListTenants(ctx, sdk.ListOptions{Limit: 2, Cursor: cur})
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range p.Items {
			if seen[it.ID] {
				t.Fatalf("tenant %s on two pages", it.Name)
			}
			seen[it.ID] = true
		}
		if p.NextCursor == "" {
			break
		}
		cur = p.NextCursor
	}
	if len(seen) != 7 || pages < 3 {
		t.Fatalf("%d tenants over %d pages, want 7 over at least 4", len(seen), pages+1)
	}
	all, err := sdk.Collect(op.Tenants(ctx))
	if err != nil || len(all) != 7 {
		t.Fatalf("iterator: %d %v", len(all), err)
	}
	// Breaking out of the iterator early stops it.
	n := 0
	for range op.Tenants(ctx) {
		n++
		break
	}
	if n != 1 {
		t.Fatalf("iterated %d after break", n)
	}
	if _, err := op.ListTenants(ctx, sdk.ListOptions{Cursor: "!!"}); !sdk.IsValidation(err) {
		t.Fatalf("bad cursor: %v", err)
	}
}

func TestCatalog(t *testing.T) {
	ctx := ctxT(t)
	e := sdktest.New(t)
	member := e.Client(t, e.A.AdminKey)
	models, err := member.ListGPUModels(ctx)
	if err != nil || len(models) != 1 || models[0].ID != e.ModelID {
		t.Fatalf("models %+v %v", models, err)
	}
	if m, err := member.GetGPUModel(ctx, e.ModelID); err != nil || m.Name != "H100" {
		t.Fatalf("model %+v %v", m, err)
	}
	types, err := sdk.Collect(member.InstanceTypes(ctx))
	if err != nil || len(types) != 3 {
		t.Fatalf("types %+v %v", types, err)
	}
	it, err := member.GetInstanceType(ctx, e.Shared)
	if err != nil || it.Tier != "shared" || it.PricePerHour != 250 || it.Currency != "USD" || it.GPUModelID != e.ModelID {
		t.Fatalf("type %+v %v", it, err)
	}
	if _, err := member.CreateInstanceType(ctx, sdk.CreateInstanceTypeRequest{Name: "x", VCPUs: 1, MemoryMiB: 1, DiskGiB: 1, Tier: "dedicated"}); !sdk.IsForbidden(err) {
		t.Fatalf("tenant creates a type: %v", err)
	}
	if _, err := e.OperatorClient.CreateInstanceType(ctx, sdk.CreateInstanceTypeRequest{Name: "g", VCPUs: 1, MemoryMiB: 1, DiskGiB: 1, GPUCount: 1, Tier: "gold"}); !sdk.IsValidation(err) {
		t.Fatalf("bad type: %v", err)
	}
	tier, err := e.OperatorClient.SetSharedTier(ctx, 20<<30)
	if err != nil || *tier.MemorySliceBytes != 20<<30 {
		t.Fatalf("tier %+v %v", tier, err)
	}
	tiers, err := member.ListTiers(ctx)
	if err != nil || len(tiers) != 2 {
		t.Fatalf("tiers %+v %v", tiers, err)
	}
}

func TestInstanceLifecycleWithAgent(t *testing.T) {
	ctx := ctxT(t)
	e := sdktest.New(t)
	_, hc := e.Host(t, "h1", 32)
	e.GPUServer(t, "g1", 1)
	actx, stop := context.WithCancel(ctx)
	defer stop()
	go sdktest.PlayHost(actx, t, hc)

	a, b := e.Client(t, e.A.AdminKey), e.Client(t, e.B.AdminKey)
	inst, err := a.CreateInstance(ctx, sdk.CreateInstanceRequest{Name: "vm1", InstanceTypeID: e.Shared, Image: "ubuntu-24.04"})
	if err != nil || inst.TenantID != e.A.ID || inst.GPUCount != 1 {
		t.Fatalf("create %+v %v", inst, err)
	}
	if inst, err = a.WaitInstance(ctx, inst.ID, 20*time.Millisecond, nil, sdk.StateRunning); err != nil {
		t.Fatal(err)
	}
	// Tenant B sees nothing of A's instance.
	if _, err := b.GetInstance(ctx, inst.ID); !sdk.IsNotFound(err) {
		t.Fatalf("B reads A's instance: %v", err)
	}
	if _, err := b.StopInstance(ctx, inst.ID); !sdk.IsNotFound(err) {
		t.Fatalf("B stops A's instance: %v", err)
	}
	if list, err := sdk.Collect(b.Instances(ctx, sdk.InstanceFilter{})); err != nil || len(list) != 0 {
		t.Fatalf("B lists %+v %v", list, err)
	}
	if _, err := a.StopInstance(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := a.WaitInstance(ctx, inst.ID, 20*time.Millisecond, nil, sdk.StateStopped); err != nil {
		t.Fatal(err)
	}
	if _, err := a.RebootInstance(ctx, inst.ID); !sdk.IsConflict(err) {
		t.Fatalf("reboot a stopped instance: %v", err)
	}
	if _, err := a.StartInstance(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := a.WaitInstance(ctx, inst.ID, 20*time.Millisecond, nil, sdk.StateRunning); err != nil {
		t.Fatal(err)
	}
	if r, err := a.RebootInstance(ctx, inst.ID); err != nil || r.RebootGeneration != 1 {
		t.Fatalf("reboot %+v %v", r, err)
	}
	if _, err := a.DeleteInstance(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := a.WaitInstance(ctx, inst.ID, 20*time.Millisecond, nil, sdk.StateDeleted); err != nil {
		t.Fatal(err)
	}
	evs, err := a.InstanceEvents(ctx, inst.ID)
	if err != nil || len(evs) < 6 || evs[len(evs)-1].To != sdk.StateDeleted {
		t.Fatalf("events %+v %v", evs, err)
	}
	// The deleted instance leaves the default list; IncludeDeleted or a state filter shows it.
	if list, err := sdk.Collect(a.Instances(ctx, sdk.InstanceFilter{})); err != nil || len(list) != 0 {
		t.Fatalf("default list after delete: %+v %v", list, err)
	}
	for _, f := range []sdk.InstanceFilter{{IncludeDeleted: true}, {States: []string{sdk.StateDeleted}, HostID: inst.HostID},
		{States: []string{sdk.StateRunning, sdk.StateDeleted}, GPUServerID: inst.GPUServerID}} {
		if list, err := sdk.Collect(a.Instances(ctx, f)); err != nil || len(list) != 1 || list[0].ID != inst.ID {
			t.Fatalf("list %+v: %+v %v", f, list, err)
		}
	}
	if list, err := sdk.Collect(a.Instances(ctx, sdk.InstanceFilter{States: []string{sdk.StateRunning}, IncludeDeleted: true})); err != nil || len(list) != 0 {
		t.Fatalf("running instances: %+v %v", list, err)
	}
	_, err = a.ListInstances(ctx, sdk.InstanceListOptions{InstanceFilter: sdk.InstanceFilter{States: []string{"gone"}}})
	if ae, ok := sdk.AsAPIError(err); !ok || len(ae.Fields) != 1 || ae.Fields[0].Field != "state" {
		t.Fatalf("bad state filter: %v", err)
	}
	_, err = a.CreateInstance(ctx, sdk.CreateInstanceRequest{Name: "vm2", InstanceTypeID: e.CPU, Image: "has space"})
	if ae, ok := sdk.AsAPIError(err); !ok || len(ae.Fields) != 1 || ae.Fields[0].Field != "image" {
		t.Fatalf("bad image: %v", err)
	}
}

// flaky drops the answer of the first request that matches: the server did the work, the
// client saw a network error. It is the failure idempotency keys exist for.
type flaky struct {
	method  string
	tripped atomic.Bool
	keys    []string
}

func (f *flaky) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if r.Method == f.method {
		f.keys = append(f.keys, r.Header.Get("Idempotency-Key"))
		if err == nil && f.tripped.CompareAndSwap(false, true) {
			resp.Body.Close()
			return nil, errors.New("connection reset (injected)")
		}
	}
	return resp, err
}

func TestRetriedCreateIsCreatedOnce(t *testing.T) {
	ctx := ctxT(t)
	e := sdktest.New(t)
	e.Host(t, "h1", 32)
	f := &flaky{method: http.MethodPost}
	c, err := sdk.New(e.URL, e.A.AdminKey, sdk.Options{HTTPClient: &http.Client{Transport: f},
		Retry: sdk.RetryPolicy{MaxAttempts: 3, MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	inst, err := c.CreateInstance(ctx, sdk.CreateInstanceRequest{Name: "once", InstanceTypeID: e.CPU, Image: "ubuntu"})
	if err != nil {
		t.Fatal(err)
	}
	if len(f.keys) != 2 || f.keys[0] == "" || f.keys[0] != f.keys[1] {
		t.Fatalf("idempotency keys over the attempts: %q", f.keys)
	}
	list, err := sdk.Collect(c.Instances(ctx, sdk.InstanceFilter{}))
	if err != nil || len(list) != 1 || list[0].ID != inst.ID {
		t.Fatalf("after a retried create: %+v %v", list, err)
	}
}

// TestRetryPolicy uses a scripted server: the apiserver cannot be made to answer 503 on cue.
func TestRetryPolicy(t *testing.T) {
	ctx := ctxT(t)
	var (
		n       atomic.Int32
		answers atomic.Pointer[[]int] // the status of each attempt in turn, then 200s
	)
	answers.Store(&[]int{503, 429, 200})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := int(n.Add(1)) - 1
		answers := *answers.Load()
		switch {
		case r.URL.Path == "/v1/tenants/bad":
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(400)
			w.Write([]byte(`{"type":"validation-failed","title":"Invalid request","status":400,"fields":[{"field":"x","reason":"y"}]}`))
		case i < len(answers) && answers[i] != 200:
			w.WriteHeader(answers[i])
			w.Write([]byte(`{"type":"no-capacity","title":"No capacity","status":503,"retryable":true}`))
		default:
			w.Write([]byte(`{"role":"operator"}`))
		}
	}))
	defer srv.Close()
	c, _ := sdk.New(srv.URL, "k", sdk.Options{Retry: sdk.RetryPolicy{MaxAttempts: 4, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}})
	if me, err := c.Me(ctx); err != nil || me.Role != "operator" || n.Load() != 3 {
		t.Fatalf("after 503, 429: %+v %v, %d attempts", me, err, n.Load())
	}
	n.Store(0)
	if _, err := c.GetTenant(ctx, "bad"); !sdk.IsValidation(err) || n.Load() != 1 {
		t.Fatalf("a 400 was retried or misread: %v, %d attempts", err, n.Load())
	}
	// Out of attempts: the last answer comes back, marked retryable.
	answers.Store(&[]int{503, 503, 503, 503, 503})
	n.Store(0)
	if _, err := c.Me(ctx); !sdk.IsRetryable(err) || n.Load() != 4 {
		t.Fatalf("exhausted: %v, %d attempts", err, n.Load())
	}
	// A cancelled context stops the waiting.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.Me(cctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
}

func TestSetUserPassword(t *testing.T) {
	ctx := ctxT(t)
	e := sdktest.New(t)
	admin := e.Client(t, e.A.AdminKey)
	if err := admin.SetUserPassword(ctx, e.A.AdminID, sdk.SetPasswordRequest{NewPassword: "correct horse battery"}); err != nil {
		t.Fatalf("first password: %v", err)
	}
	// Changing it again needs the current one.
	err := admin.SetUserPassword(ctx, e.A.AdminID, sdk.SetPasswordRequest{CurrentPassword: "wrong password!", NewPassword: "another long one"})
	if ae, ok := sdk.AsAPIError(err); !ok || ae.Status != 400 && ae.Status != 403 {
		t.Fatalf("wrong current password: got %v", err)
	}
	// Tenant B's admin cannot touch tenant A's admin.
	other := e.Client(t, e.B.AdminKey)
	err = other.SetUserPassword(ctx, e.A.AdminID, sdk.SetPasswordRequest{NewPassword: "hijacked password"})
	if ae, ok := sdk.AsAPIError(err); !ok || ae.Status != 404 && ae.Status != 403 {
		t.Fatalf("cross-tenant password change: got %v", err)
	}
}
