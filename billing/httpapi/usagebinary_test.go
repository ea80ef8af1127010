package httpapi_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"gpucloud/api"
	"gpucloud/billing/billingtest"
)

// The binary form takes the same checks as JSON: the daemon's own source, id namespace and kind,
// duplicates counted once, the rest of the batch landing; a body that cannot be read whole is
// refused whole, naming where reading stopped, and nothing of it lands.
func TestPostUsageBinary(t *testing.T) {
	h := newServer(t)
	tenant := uuid.New()
	good := record("b1", tenant, march, time.Hour)
	forged := record("forged", tenant, march, time.Hour)
	forged.Source = "someone-else"
	foreignID := record("x", tenant, march, time.Hour)
	foreignID.ID = "00000000-0000-4000-8000-0000000000aa/sess/1"
	vm := billingtest.VM(daemon.String()+"/vm", tenant, march, time.Hour)
	vm.Source = daemon.String()
	body := api.AppendUsageBatch(nil, []api.UsageRecord{good, forged, good, foreignID, vm})
	binary := []string{"Content-Type", api.UsageBatchBinary}
	res := decode[api.UsageBatchResult](t, do(t, h, dmn, "POST", "/v1/agent/usage", string(body), binary...), 200)
	if res.Accepted != 1 || res.Duplicates != 1 || len(res.Rejected) != 3 ||
		res.Rejected[0].Index != 1 || !strings.HasPrefix(res.Rejected[0].Reason, "source:") ||
		res.Rejected[1].Index != 3 || !strings.HasPrefix(res.Rejected[1].Reason, "id:") ||
		res.Rejected[2].Index != 4 || !strings.HasPrefix(res.Rejected[2].Reason, "kind:") {
		t.Fatalf("%+v, want 1 accepted, 1 duplicate, forged/foreign/vm rejected", res)
	}
	// Sent again as JSON: the same record, a duplicate.
	res = decode[api.UsageBatchResult](t, do(t, h, dmn, "POST", "/v1/agent/usage", api.UsageBatch{Records: []api.UsageRecord{good}}), 200)
	if res.Accepted != 0 || res.Duplicates != 1 {
		t.Fatalf("the binary record again as JSON: %+v, want a duplicate", res)
	}

	other := record("b2", tenant, march, time.Hour)
	cut := api.AppendUsageBatch(nil, []api.UsageRecord{other, good})
	for _, c := range []struct {
		name, body, field string
	}{
		{"cut short", string(cut[:len(cut)-3]), "records[1].instance_type"},
		{"JSON under the binary type", `{"records":[]}`, "records"},
	} {
		w := do(t, h, dmn, "POST", "/v1/agent/usage", c.body, binary...)
		if w.Code != 400 || !strings.Contains(w.Body.String(), `"`+c.field+`"`) {
			t.Errorf("%s: %d %s, want 400 naming %s", c.name, w.Code, w.Body, c.field)
		}
	}
	res = decode[api.UsageBatchResult](t, do(t, h, dmn, "POST", "/v1/agent/usage", api.UsageBatch{Records: []api.UsageRecord{other}}), 200)
	if res.Accepted != 1 {
		t.Fatalf("a record of a refused binary body landed: %+v", res)
	}
}
