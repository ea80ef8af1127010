package sdk

import (
	"fmt"
	"net/url"
	"strings"
)

// Op is one API operation: an HTTP method on a path template with {name} parameters.
type Op struct {
	Method, Path string
}

func (o Op) String() string { return o.Method + " " + o.Path }

// expand fills the template's parameters in order, escaping each.
func (o Op) expand(args ...string) (string, error) {
	segs := strings.Split(o.Path, "/")
	n := 0
	for i, s := range segs {
		if !strings.HasPrefix(s, "{") {
			continue
		}
		if n >= len(args) || args[n] == "" {
			return "", fmt.Errorf("sdk: %s: %s is required", o, s)
		}
		segs[i] = url.PathEscape(args[n])
		n++
	}
	if n != len(args) {
		return "", fmt.Errorf("sdk: %s takes %d path arguments, got %d", o, n, len(args))
	}
	return strings.Join(segs, "/"), nil
}

var ops []Op

func op(method, path string) Op {
	o := Op{method, path}
	ops = append(ops, o)
	return o
}

// Ops lists every operation the SDK calls.
func Ops() []Op { return append([]Op(nil), ops...) }

// The operations, grouped like the OpenAPI document's tags.
var (
	opGetMe        = op("GET", "/v1/me")
	opCreateTenant = op("POST", "/v1/tenants")
	opListTenants  = op("GET", "/v1/tenants")
	opGetTenant    = op("GET", "/v1/tenants/{id}")
	opSetQuota     = op("PUT", "/v1/tenants/{id}/quota")
	opCreateUser   = op("POST", "/v1/users")
	opListUsers    = op("GET", "/v1/users")
	opGetUser      = op("GET", "/v1/users/{id}")
	opCreateKey    = op("POST", "/v1/users/{id}/api-keys")
	opListKeys     = op("GET", "/v1/users/{id}/api-keys")
	opRevokeKey    = op("DELETE", "/v1/api-keys/{id}")
	opSetPassword  = op("PUT", "/v1/users/{id}/password")

	opListGPUModels     = op("GET", "/v1/gpu-models")
	opGetGPUModel       = op("GET", "/v1/gpu-models/{id}")
	opCreateGPUModel    = op("POST", "/v1/gpu-models")
	opListTiers         = op("GET", "/v1/tiers")
	opSetSharedTier     = op("PUT", "/v1/tiers/shared")
	opListInstanceTypes = op("GET", "/v1/instance-types")
	opGetInstanceType   = op("GET", "/v1/instance-types/{id}")
	opCreateInstType    = op("POST", "/v1/instance-types")
	opListImages        = op("GET", "/v1/images")
	opGetImage          = op("GET", "/v1/images/{id}")
	opCreateImage       = op("POST", "/v1/images")
	opDeleteImage       = op("DELETE", "/v1/images/{id}")
	opListSSHKeys       = op("GET", "/v1/ssh-keys")
	opGetSSHKey         = op("GET", "/v1/ssh-keys/{id}")
	opCreateSSHKey      = op("POST", "/v1/ssh-keys")
	opDeleteSSHKey      = op("DELETE", "/v1/ssh-keys/{id}")
	opListVolumes       = op("GET", "/v1/volumes")
	opGetVolume         = op("GET", "/v1/volumes/{id}")
	opCreateVolume      = op("POST", "/v1/volumes")
	opAttachVolume      = op("POST", "/v1/volumes/{id}/attach")
	opDetachVolume      = op("POST", "/v1/volumes/{id}/detach")
	opDeleteVolume      = op("DELETE", "/v1/volumes/{id}")

	opCreateInstance = op("POST", "/v1/instances")
	opGetConsole     = op("GET", "/v1/instances/{id}/console")
	opConsoleTicket  = op("POST", "/v1/instances/{id}/console/tickets")
	opOpenConsole    = op("GET", "/v1/instances/{id}/console/ws")
	opListInstances  = op("GET", "/v1/instances")
	opGetInstance    = op("GET", "/v1/instances/{id}")
	opInstanceEvents = op("GET", "/v1/instances/{id}/events")
	opStartInstance  = op("POST", "/v1/instances/{id}/start")
	opStopInstance   = op("POST", "/v1/instances/{id}/stop")
	opRebootInstance = op("POST", "/v1/instances/{id}/reboot")
	opDeleteInstance = op("DELETE", "/v1/instances/{id}")

	hostOps      = fleetOps("/v1/hosts")
	gpuServerOps = fleetOps("/v1/gpu-servers")
	opListAudit  = op("GET", "/v1/audit-events")
	// opGPUServerDrain reads a GPU server's drain (its moves); a drain that moves work is
	// gpuServerOps.drain with {"move": true}.
	opGPUServerDrain = op("GET", "/v1/gpu-servers/{id}/drain")
	// opHostDrain reads a host's drain (its moves); a drain that moves VMs is hostOps.drain with
	// {"move": true}.
	opHostDrain = op("GET", "/v1/hosts/{id}/drain")

	opHostHeartbeat      = op("POST", "/v1/agent/host/heartbeat")
	opHostInstances      = op("GET", "/v1/agent/host/instances")
	opHostReport         = op("PUT", "/v1/agent/host/instances/{id}/status")
	opRenewToken         = op("POST", "/v1/agent/host/instances/{id}/token")
	opHostReportMove     = op("PUT", "/v1/agent/host/moves/{id}")
	opGPUServerHeartbeat = op("POST", "/v1/agent/gpu-server/heartbeat")
	opRevocations        = op("GET", "/v1/agent/gpu-server/revocations")
	opPostUsage          = op("POST", "/v1/agent/usage")

	// Billing's routes (billing/httpapi, mounted by the apiserver).
	opGetUsage       = op("GET", "/v1/usage")
	opListInvoices   = op("GET", "/v1/invoices")
	opGetInvoice     = op("GET", "/v1/invoices/{id}")
	opListPrices     = op("GET", "/v1/prices")
	opAddPrice       = op("POST", "/v1/prices")
	opListPeriods    = op("GET", "/v1/periods")
	opClosePeriod    = op("POST", "/v1/periods/close")
	opGPUHoursReport = op("GET", "/v1/reports/gpu-hours")
	opBillingReport  = op("GET", "/v1/reports/billing")
	opGetBalance     = op("GET", "/v1/balance")
	opListCredits    = op("GET", "/v1/credits")
	opAddCredit      = op("POST", "/v1/credits")
	opGetBudget      = op("GET", "/v1/budget")
	opPutBudget      = op("PUT", "/v1/budget")
	opCreateWebhook  = op("POST", "/v1/webhooks")
	opListWebhooks   = op("GET", "/v1/webhooks")
	opDeleteWebhook  = op("DELETE", "/v1/webhooks/{id}")
	opListDeliveries = op("GET", "/v1/webhooks/{id}/deliveries")
	opCloseAll       = op("POST", "/v1/periods/close-all")
	opGetCloseJob    = op("GET", "/v1/periods/close-jobs/{id}")
)

// fleet is the same set of operations on hosts and on GPU servers.
type fleet struct {
	create, list, get, cordon, uncordon, drain, del Op
}

func fleetOps(base string) fleet {
	return fleet{
		create: op("POST", base), list: op("GET", base), get: op("GET", base+"/{id}"),
		cordon: op("POST", base+"/{id}/cordon"), uncordon: op("POST", base+"/{id}/uncordon"),
		drain: op("POST", base+"/{id}/drain"), del: op("DELETE", base+"/{id}"),
	}
}
