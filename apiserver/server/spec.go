package server

import (
	"net/http"
	"strings"

	"gpucloud/api"
	"gpucloud/apiserver/openapi"
	"gpucloud/apiserver/store"
	"gpucloud/internal/problem"
)

// Document is the apiserver's own part of the OpenAPI document. Other parts merge theirs in
// through Options.Paths; the test in this package checks it against the router both ways.
func Document() *openapi.Document {
	d := openapi.New("gpucloud API", "v1")
	d.SchemaFor(problem.Details{})
	d.Components.Schemas["Problem"] = d.Components.Schemas["Details"]
	const (
		get, post, put, del              = http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete
		ok, created, noContent, accepted = http.StatusOK, http.StatusCreated, http.StatusNoContent, http.StatusAccepted
	)
	op := d.Op
	op(get, "/v1/me", "getMe", "Who the caller is", "accounts", nil, Me{}, ok)
	op(post, "/v1/tenants", "createTenant", "Create a tenant (operator)", "accounts", CreateTenantRequest{}, store.Tenant{}, created)
	op(get, "/v1/tenants", "listTenants", "List tenants (operator, finance)", "accounts", nil, Page[store.Tenant]{}, ok)
	op(get, "/v1/tenants/{id}", "getTenant", "Get a tenant with its quotas and usage", "accounts", nil, store.Tenant{}, ok)
	op(put, "/v1/tenants/{id}/quota", "setQuota", "Set a tenant's quotas (operator)", "accounts", QuotaRequest{}, store.Tenant{}, ok)
	op(post, "/v1/users", "createUser", "Invite a user (operator; tenant admin into their tenant)", "accounts", CreateUserRequest{}, store.User{}, created)
	op(get, "/v1/users", "listUsers", "List users", "accounts", nil, Page[store.User]{}, ok)
	op(get, "/v1/users/{id}", "getUser", "Get a user", "accounts", nil, store.User{}, ok)
	op(post, "/v1/users/{id}/api-keys", "createAPIKey", "Create an API key; the secret is shown once", "accounts", CreateKeyRequest{}, NewAPIKey{}, created)
	op(get, "/v1/users/{id}/api-keys", "listAPIKeys", "List a user's API keys", "accounts", nil, Page[store.APIKey]{}, ok)
	op(del, "/v1/api-keys/{id}", "revokeAPIKey", "Revoke an API key", "accounts", nil, nil, noContent)

	op(get, "/v1/gpu-models", "listGPUModels", "List GPU models", "catalog", nil, Page[store.GPUModel]{}, ok)
	op(get, "/v1/gpu-models/{id}", "getGPUModel", "Get a GPU model", "catalog", nil, store.GPUModel{}, ok)
	op(post, "/v1/gpu-models", "createGPUModel", "Add a GPU model (operator)", "catalog", CreateGPUModelRequest{}, store.GPUModel{}, created)
	op(get, "/v1/tiers", "listTiers", "List tiers", "catalog", nil, Page[store.Tier]{}, ok)
	op(put, "/v1/tiers/shared", "setSharedTier", "Set the shared tier's GPU memory slice (operator)", "catalog", SetTierRequest{}, store.Tier{}, ok)
	op(get, "/v1/instance-types", "listInstanceTypes", "List instance types with hourly prices", "catalog", nil, Page[store.InstanceType]{}, ok)
	op(get, "/v1/instance-types/{id}", "getInstanceType", "Get an instance type", "catalog", nil, store.InstanceType{}, ok)
	op(post, "/v1/instance-types", "createInstanceType", "Add an instance type (operator)", "catalog", CreateInstanceTypeRequest{}, store.InstanceType{}, created)

	op(get, "/v1/images", "listImages", "List images instances can boot", "catalog", nil, Page[store.Image]{}, ok)
	op(get, "/v1/images/{id}", "getImage", "Get an image", "catalog", nil, store.Image{}, ok)
	op(post, "/v1/images", "createImage", "Register an image: source, checksum, minimum disk (operator)", "catalog", CreateImageRequest{}, store.Image{}, created)
	op(del, "/v1/images/{id}", "deleteImage", "Retire an image; instances made from it keep it (operator)", "catalog", nil, nil, noContent)

	op(get, "/v1/ssh-keys", "listSSHKeys", "List the caller's SSH public keys", "ssh-keys", nil, Page[store.SSHKey]{}, ok)
	op(get, "/v1/ssh-keys/{id}", "getSSHKey", "Get one of the caller's SSH keys", "ssh-keys", nil, store.SSHKey{}, ok)
	op(post, "/v1/ssh-keys", "createSSHKey", "Add an SSH public key (validated, fingerprinted; a duplicate is refused)", "ssh-keys", CreateSSHKeyRequest{}, store.SSHKey{}, created)
	op(del, "/v1/ssh-keys/{id}", "deleteSSHKey", "Delete an SSH key; VMs created with it keep it", "ssh-keys", nil, nil, noContent)

	op(get, "/v1/volumes", "listVolumes", "List the tenant's volumes", "volumes", nil, Page[store.Volume]{}, ok)
	op(get, "/v1/volumes/{id}", "getVolume", "Get one of the tenant's volumes", "volumes", nil, store.Volume{}, ok)
	op(post, "/v1/volumes", "createVolume", "Create a volume (403 quota-exceeded past the tenant's volumes or volume_gib quota; storage is charged per GiB-hour while it exists)", "volumes", CreateVolumeRequest{}, store.Volume{}, created)
	op(post, "/v1/volumes/{id}/attach", "attachVolume", "Attach a volume to an instance (hotplugged into a running VM, else at its next start)", "volumes", AttachVolumeRequest{}, store.Volume{}, ok)
	op(post, "/v1/volumes/{id}/detach", "detachVolume", "Detach a volume; its data stays", "volumes", nil, store.Volume{}, ok)
	op(del, "/v1/volumes/{id}", "deleteVolume", "Delete a detached volume and its data", "volumes", nil, nil, noContent)

	op(post, "/v1/instances", "createInstance", "Create an instance: placed and reserved at once (402 credit-exhausted while the tenant's budget hard-stops creates)", "instances", CreateInstanceRequest{}, store.Instance{}, created)
	op(get, "/v1/instances", "listInstances", "List instances (live ones unless asked for deleted)", "instances", nil, Page[store.Instance]{}, ok)
	d.Params(get, "/v1/instances", pageParams()...)
	d.Params(get, "/v1/instances",
		openapi.QueryParam("state", openapi.Schema{"type": "array", "items": openapi.Schema{"type": "string", "enum": store.States}},
			"only instances in these states; repeat the parameter or separate states by commas"),
		openapi.QueryParam("host_id", openapi.Schema{"type": "string", "format": "uuid"}, "only instances on this host"),
		openapi.QueryParam("gpu_server_id", openapi.Schema{"type": "string", "format": "uuid"}, "only instances with GPUs on this GPU server"),
		openapi.QueryParam("condition", openapi.Schema{"type": "array", "items": openapi.Schema{"type": "string",
			"pattern": "^(HostReachable|GPUServerReachable)=(True|False)$"}},
			"only live instances with these conditions, each TYPE=STATUS (e.g. HostReachable=False); repeat the parameter or separate by commas; all must hold"),
		openapi.QueryParam("include_deleted", openapi.Schema{"type": "boolean", "default": false},
			"include deleted instances (also included when state names deleted)"))
	op(get, "/v1/instances/{id}", "getInstance", "Get an instance", "instances", nil, store.Instance{}, ok)
	op(get, "/v1/instances/{id}/events", "listInstanceEvents", "An instance's state transitions", "instances", nil, Page[store.Event]{}, ok)
	op(get, "/v1/instances/{id}/console", "getInstanceConsole", "The tail of an instance's serial console (audited)", "instances", nil, store.ConsoleLog{}, ok)
	op(post, "/v1/instances/{id}/console/tickets", "createConsoleTicket", "A single-use ticket (30 s) that opens the instance's interactive serial console at the returned url (tenants, operators)", "instances", nil, ConsoleTicketResponse{}, created)
	op(get, "/v1/instances/{id}/console/ws", "openConsole", "The interactive serial console: a WebSocket (upgrade), authenticated by ?ticket= alone; binary frames both ways, one session per instance, closed when idle (audited: console-open, console-close with bytes)", "instances", nil, nil, http.StatusSwitchingProtocols)
	d.Params(get, "/v1/instances/{id}/console/ws", openapi.QueryParam("ticket", openapi.Schema{"type": "string"}, "the ticket from POST /v1/instances/{id}/console/tickets"))
	op(post, "/v1/instances/{id}/start", "startInstance", "Start a stopped instance", "instances", nil, store.Instance{}, ok)
	op(post, "/v1/instances/{id}/stop", "stopInstance", "Stop an instance", "instances", nil, store.Instance{}, ok)
	op(post, "/v1/instances/{id}/reboot", "rebootInstance", "Reboot a running instance", "instances", nil, store.Instance{}, ok)
	op(del, "/v1/instances/{id}", "deleteInstance", "Delete an instance", "instances", nil, store.Instance{}, accepted)

	for _, k := range []struct {
		base, name string
		v, list    any
	}{
		{"/v1/hosts", "Host", store.Host{}, Page[store.Host]{}},
		{"/v1/gpu-servers", "GPUServer", store.GPUServer{}, Page[store.GPUServer]{}},
	} {
		op(post, k.base, "create"+k.name, "Register a "+k.name+"; its credential is shown once (operator)", "fleet", CreateDaemonRequest{}, NewDaemon{}, created)
		op(get, k.base, "list"+k.name+"s", "List "+k.name+"s (operator)", "fleet", nil, k.list, ok)
		op(get, k.base+"/{id}", "get"+k.name, "Get a "+k.name+" (operator)", "fleet", nil, k.v, ok)
		for _, a := range []string{"cordon", "uncordon", "drain"} {
			if a == "drain" {
				continue // below: it takes a body
			}
			op(post, k.base+"/{id}/"+a, a+k.name, strings.ToUpper(a[:1])+a[1:]+" a "+k.name+" (operator)", "fleet", nil, k.v, ok)
		}
		op(del, k.base+"/{id}", "delete"+k.name, "Delete a "+k.name+" without instances (operator)", "fleet", nil, nil, noContent)
	}
	op(post, "/v1/gpu-servers/{id}/drain", "drainGPUServer", "Drain a GPUServer (operator): without a body it answers the GPUServer; with {\"move\": true} it plans a move of each instance to another GPU server and answers the drain's status", "fleet", DrainRequest{}, store.DrainStatus{}, ok)
	op(get, "/v1/gpu-servers/{id}/drain", "getGPUServerDrain", "A GPUServer's drain: its moves and what is left (operator)", "fleet", nil, store.DrainStatus{}, ok)
	op(post, "/v1/hosts/{id}/drain", "drainHost", "Drain a Host (operator): without a body it answers the Host; with {\"move\": true} it plans a move of each VM to another host (mode restart, or live where the hosts allow it) and answers the drain's status", "fleet", HostDrainRequest{}, store.HostDrainStatus{}, ok)
	op(get, "/v1/hosts/{id}/drain", "getHostDrain", "A Host's drain: its moves and what is left (operator)", "fleet", nil, store.HostDrainStatus{}, ok)
	op(get, "/v1/audit-events", "listAuditEvents", "The audit log (operator, finance; tenant admins see their tenant)", "audit", nil, AuditPage{}, ok)

	op(post, "/v1/agent/host/heartbeat", "hostHeartbeat", "Host registration and heartbeat", "agent", api.HostReport{}, api.HostAck{}, ok)
	op(get, "/v1/agent/host/instances", "hostInstances", "Instances wanted on the calling host", "agent", nil, api.DesiredInstances{}, ok)
	op(put, "/v1/agent/host/instances/{id}/status", "hostReportInstance", "Observed state of an instance", "agent", api.InstanceObserved{}, nil, noContent)
	op(put, "/v1/agent/host/moves/{id}", "hostReportMove", "A host's report on a drain's move it is the source or target of", "agent", api.HostMoveReport{}, nil, noContent)
	op(post, "/v1/agent/host/instances/{id}/token", "renewSessionToken", "Renew an instance's session token", "agent", nil, api.SessionToken{}, ok)
	op(post, "/v1/agent/gpu-server/heartbeat", "gpuServerHeartbeat", "GPU server registration and heartbeat", "agent", api.GPUServerReport{}, api.GPUServerAck{}, ok)
	op(get, "/v1/agent/gpu-server/revocations", "gpuServerRevocations", "Long-poll the calling GPU server's revoked instances (?known=version&wait=25s)", "agent", nil, api.Revocations{}, ok)
	return d
}

// ginToOpenAPI turns /a/:id into /a/{id}.
func ginToOpenAPI(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		if strings.HasPrefix(s, ":") || strings.HasPrefix(s, "*") {
			segs[i] = "{" + s[1:] + "}"
		}
	}
	return strings.Join(segs, "/")
}

// pageParams documents the cursor pagination of lists (pageArgs).
func pageParams() []openapi.Parameter {
	return []openapi.Parameter{
		openapi.QueryParam("limit", openapi.Schema{"type": "integer", "minimum": 1, "maximum": 200, "default": 50}, "page size"),
		openapi.QueryParam("cursor", openapi.Schema{"type": "string"}, "next_cursor of the previous page"),
	}
}
