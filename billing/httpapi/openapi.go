package httpapi

// OpenAPIPaths returns the OpenAPI 3 path items of billing's routes, keyed by their full path
// under the apiserver (/v1/...), for the apiserver to merge into its document. Schemas are
// inline so the map stands alone.
func OpenAPIPaths() map[string]any {
	problemResp := func(desc string) map[string]any {
		return map[string]any{"description": desc, "content": map[string]any{
			"application/problem+json": map[string]any{"schema": map[string]any{"type": "object"}}}}
	}
	jsonResp := func(desc string, schema map[string]any) map[string]any {
		return map[string]any{"description": desc, "content": map[string]any{"application/json": map[string]any{"schema": schema}}}
	}
	errs := func(r map[string]any, codes ...string) map[string]any {
		for _, c := range codes {
			r[c] = problemResp(map[string]string{"400": "Invalid request", "401": "Unauthenticated", "403": "Forbidden",
				"404": "Not found", "409": "Conflict", "413": "Body too large", "500": "Internal error", "503": "Unavailable, retry"}[c])
		}
		return r
	}
	param := func(name, in, desc string, required bool, schema map[string]any) map[string]any {
		return map[string]any{"name": name, "in": in, "description": desc, "required": required, "schema": schema}
	}
	str := map[string]any{"type": "string"}
	enum := func(v ...string) map[string]any { return map[string]any{"type": "string", "enum": v} }
	obj := map[string]any{"type": "object"}
	// The apiserver's idempotency layer serves every POST of /v1 but the agent API: a retried
	// price add or period close with the same key gets the first answer back.
	idemKey := []any{param("Idempotency-Key", "header", "replays the first answer for a retried request", false, str)}
	rangeParams := []any{
		param("from", "query", "start, inclusive: RFC 3339, YYYY-MM-DD or YYYY-MM (default: this month)", false, str),
		param("to", "query", "end, exclusive (default: next month)", false, str),
	}
	body := func(schema map[string]any) map[string]any {
		return map[string]any{"required": true, "content": map[string]any{"application/json": map[string]any{"schema": schema}}}
	}
	usageRecord := map[string]any{"type": "object", "required": []string{"id", "kind", "source", "tenant_id", "instance_id", "start", "end"},
		"properties": map[string]any{
			"id": str, "kind": enum("gpu", "vm"), "source": str, "tenant_id": str, "instance_id": str, "session_id": str,
			"start": map[string]any{"type": "string", "format": "date-time"}, "end": map[string]any{"type": "string", "format": "date-time"},
			"gpu_model": str, "tier": enum("dedicated", "shared"), "gpu_count": map[string]any{"type": "integer"},
			"memory_quota": map[string]any{"type": "integer"}, "memory_peak_bytes": map[string]any{"type": "integer"},
			"memory_avg_bytes": map[string]any{"type": "integer"}, "bytes_moved": map[string]any{"type": "integer"},
			"instance_type": str, "vcpus": map[string]any{"type": "integer"}, "memory_mib": map[string]any{"type": "integer"},
		}}
	return map[string]any{
		"/v1/agent/usage": map[string]any{"post": map[string]any{
			"operationId": "postUsage", "tags": []string{"billing"},
			"summary":     "Push a batch of up to 1,000 usage records (daemons); each is stored exactly once by id",
			"description": "A daemon may report only its own kind of usage (host: vm, GPU server: gpu), with ids in its namespace (\"<daemon id>/...\"), for instances placed on it, with the tenant, type, size, tier and GPU count the control plane holds. Other records are listed under rejected, naming the field; the rest of the batch is stored. The body may also be the binary form of api.UsageBatchBinary (Content-Type application/vnd.gpucloud.usage-batch, see api/usagebin.go), which is refused whole (400 naming where reading stopped) when it cannot be read whole.",
			"requestBody": body(map[string]any{"type": "object", "required": []string{"records"},
				"properties": map[string]any{"records": map[string]any{"type": "array", "maxItems": 1000, "items": usageRecord}}}),
			"responses": errs(map[string]any{"200": jsonResp("accepted, duplicate and rejected counts", obj)}, "400", "401", "403", "413", "500", "503"),
		}},
		"/v1/usage": map[string]any{"get": map[string]any{
			"operationId": "getUsage", "tags": []string{"billing"}, "summary": "The caller's tenant usage per day or month",
			"parameters": append([]any{param("tenant_id", "query", "platform roles: the tenant", false, str),
				param("granularity", "query", "bucket size", false, enum("day", "month"))}, rangeParams...),
			"responses": errs(map[string]any{"200": jsonResp("usage rows", obj)}, "400", "401", "403", "404", "500"),
		}},
		"/v1/invoices": map[string]any{"get": map[string]any{
			"operationId": "listInvoices", "tags": []string{"billing"}, "summary": "Closed invoices (tenants: their own)",
			"parameters": []any{param("tenant_id", "query", "platform roles: filter by tenant", false, str),
				param("limit", "query", "1..1000", false, map[string]any{"type": "integer"}),
				param("cursor", "query", "the previous page's next_cursor", false, str)},
			"responses": errs(map[string]any{"200": jsonResp("invoices (items, next_cursor when the page is full)", obj)}, "400", "401", "403", "404", "500"),
		}},
		"/v1/invoices/{id}": map[string]any{"get": map[string]any{
			"operationId": "getInvoice", "tags": []string{"billing"},
			"summary": "An invoice with its line items; its lines as CSV with Accept: text/csv or format=csv",
			"parameters": []any{param("id", "path", "invoice id", true, str),
				param("format", "query", "json (default) or csv", false, enum("json", "csv"))},
			"responses": errs(map[string]any{"200": map[string]any{"description": "the invoice", "content": map[string]any{
				"application/json": map[string]any{"schema": obj}, "text/csv": map[string]any{"schema": str}}}}, "400", "401", "403", "404", "500"),
		}},
		"/v1/prices": map[string]any{
			"get": map[string]any{
				"operationId": "listPrices", "tags": []string{"billing"}, "summary": "The price book",
				"responses": errs(map[string]any{"200": jsonResp("price entries", obj)}, "401", "403", "500"),
			},
			"post": map[string]any{
				"operationId": "addPrice", "tags": []string{"billing"}, "parameters": idemKey,
				"summary": "Add a price entry (finance): micro-units per GPU-hour (dedicated), GiB-hour of quota (shared) or VM-hour, from a whole hour",
				"requestBody": body(map[string]any{"type": "object", "required": []string{"kind", "unit_price_micros", "effective_from"},
					"properties": map[string]any{"kind": enum("gpu", "vm"), "gpu_model": str, "tier": enum("dedicated", "shared"),
						"instance_type": str, "unit_price_micros": map[string]any{"type": "integer"}, "currency": enum("USD"),
						"effective_from": map[string]any{"type": "string", "format": "date-time"}}}),
				"responses": errs(map[string]any{"201": jsonResp("the entry", obj)}, "400", "401", "403", "409", "500"),
			},
		},
		"/v1/periods": map[string]any{"get": map[string]any{
			"operationId": "listPeriods", "tags": []string{"billing"},
			"summary": "Months with usage or an invoice, newest first: open (ended: may be closed now) or closed with their invoice (tenants: their own)",
			"parameters": []any{param("tenant_id", "query", "platform roles: filter by tenant", false, str),
				param("status", "query", "only open or only closed months", false, enum("open", "closed")),
				param("limit", "query", "1..1000", false, map[string]any{"type": "integer"}),
				param("cursor", "query", "the previous page's next_cursor", false, str)},
			"responses": errs(map[string]any{"200": jsonResp("periods (items, next_cursor when the page is full)", obj)}, "400", "401", "403", "404", "500"),
		}},
		"/v1/periods/close": map[string]any{"post": map[string]any{
			"operationId": "closePeriod", "tags": []string{"billing"}, "parameters": idemKey, "summary": "Close a tenant's month into a final invoice (finance)",
			"requestBody": body(map[string]any{"type": "object", "required": []string{"tenant_id", "period"},
				"properties": map[string]any{"tenant_id": str, "period": map[string]any{"type": "string", "pattern": `^\d{4}-\d{2}$`}}}),
			"responses": errs(map[string]any{"201": jsonResp("the invoice", obj)}, "400", "401", "403", "409", "500"),
		}},
		"/v1/balance": map[string]any{"get": map[string]any{
			"operationId": "getBalance", "tags": []string{"billing"},
			"summary":    "Running balance: prepaid credit left minus what was held and not yet invoiced, month to date, and the budget (tenants: their own)",
			"parameters": []any{param("tenant_id", "query", "platform roles: the tenant (required)", false, str)},
			"responses":  errs(map[string]any{"200": jsonResp("balance and budget", obj)}, "400", "401", "403", "404", "500"),
		}},
		"/v1/credits": map[string]any{
			"get": map[string]any{
				"operationId": "listCredits", "tags": []string{"billing"}, "summary": "Credit grants in draw order (tenants: their own)",
				"parameters": []any{param("tenant_id", "query", "platform roles: filter by tenant", false, str)},
				"responses":  errs(map[string]any{"200": jsonResp("grants", obj)}, "400", "401", "403", "404", "500"),
			},
			"post": map[string]any{
				"operationId": "addCredit", "tags": []string{"billing"}, "parameters": idemKey,
				"summary": "Grant prepaid credit (finance): drawn at period close by priority (lower first), then soonest expiry",
				"requestBody": body(map[string]any{"type": "object", "required": []string{"tenant_id", "amount_cents"},
					"properties": map[string]any{"tenant_id": str, "amount_cents": map[string]any{"type": "integer"},
						"priority": map[string]any{"type": "integer"}, "expires_at": map[string]any{"type": "string", "format": "date-time"}, "note": str}}),
				"responses": errs(map[string]any{"201": jsonResp("the grant", obj)}, "400", "401", "403", "500"),
			},
		},
		"/v1/budget": map[string]any{
			"get": map[string]any{
				"operationId": "getBudget", "tags": []string{"billing"}, "summary": "The tenant's monthly budget",
				"parameters": []any{param("tenant_id", "query", "platform roles: the tenant (required)", false, str)},
				"responses":  errs(map[string]any{"200": jsonResp("the budget", obj)}, "400", "401", "403", "404", "500"),
			},
			"put": map[string]any{
				"operationId": "putBudget", "tags": []string{"billing"},
				"summary":    "Set the monthly budget (tenant admin: own; finance: tenant_id): alert thresholds in percent, and a hard stop when prepaid credit is exhausted",
				"parameters": []any{param("tenant_id", "query", "finance: the tenant (required)", false, str)},
				"requestBody": body(map[string]any{"type": "object", "required": []string{"limit_cents"},
					"properties": map[string]any{"limit_cents": map[string]any{"type": "integer"},
						"thresholds": map[string]any{"type": "array", "items": map[string]any{"type": "integer"}},
						"hard_stop":  enum("none", "block_create", "stop_instances")}}),
				"responses": errs(map[string]any{"200": jsonResp("the budget", obj)}, "400", "401", "403", "404", "500"),
			},
		},
		"/v1/webhooks": map[string]any{
			"get": map[string]any{
				"operationId": "listWebhooks", "tags": []string{"billing"}, "summary": "Webhook endpoints (tenants: their own; finance: all, each with its owner, tenant or finance)",
				"parameters": []any{param("tenant_id", "query", "platform roles: filter by tenant", false, str)},
				"responses":  errs(map[string]any{"200": jsonResp("endpoints", obj)}, "400", "401", "403", "404", "500"),
			},
			"post": map[string]any{
				"operationId": "createWebhook", "tags": []string{"billing"}, "parameters": idemKey,
				"summary": "Register a webhook endpoint (tenant admin: its events; finance: one tenant's or, without tenant_id, every tenant's; finance's endpoints are owned by finance: the tenant neither sees nor deletes them). Deliveries are POSTs signed in header Gpucloud-Signature: t=<unix>,v1=<hex HMAC-SHA256 of '<t>.<body>' keyed by the secret>; Gpucloud-Event names the type, Gpucloud-Delivery the delivery (the same on retries). The secret is in this answer only",
				"requestBody": body(map[string]any{"type": "object", "required": []string{"url", "events"},
					"properties": map[string]any{"url": str, "tenant_id": str, "events": map[string]any{"type": "array",
						"items": enum("budget.threshold", "credit.low", "invoice.closed", "instance.failed", "instance.state")}}}),
				"responses": errs(map[string]any{"201": jsonResp("the endpoint with its secret", obj)}, "400", "401", "403", "500"),
			},
		},
		"/v1/webhooks/{id}": map[string]any{"delete": map[string]any{
			"operationId": "deleteWebhook", "tags": []string{"billing"}, "summary": "Stop an endpoint (its pending deliveries are dropped, its log kept)",
			"parameters": []any{param("id", "path", "endpoint id", true, str)},
			"responses":  errs(map[string]any{"204": map[string]any{"description": "deleted"}}, "400", "401", "403", "404", "500"),
		}},
		"/v1/webhooks/{id}/deliveries": map[string]any{"get": map[string]any{
			"operationId": "listWebhookDeliveries", "tags": []string{"billing"},
			"summary": "An endpoint's delivery log, newest first: status (pending, delivered, failed), attempts, last answer",
			"parameters": []any{param("id", "path", "endpoint id", true, str),
				param("limit", "query", "1..1000 (default 100)", false, map[string]any{"type": "integer"}),
				param("cursor", "query", "the previous page's next_cursor", false, str)},
			"responses": errs(map[string]any{"200": jsonResp("deliveries", obj)}, "400", "401", "403", "404", "500"),
		}},
		"/v1/periods/close-all": map[string]any{"post": map[string]any{
			"operationId": "closeAllPeriods", "tags": []string{"billing"}, "parameters": idemKey,
			"summary": "Close a month for every tenant (finance): starts a durable job (or returns the one running for that month); resumed by another replica if this one dies",
			"requestBody": body(map[string]any{"type": "object", "required": []string{"period"},
				"properties": map[string]any{"period": map[string]any{"type": "string", "pattern": `^\d{4}-\d{2}$`}}}),
			"responses": errs(map[string]any{"202": jsonResp("the job", obj)}, "400", "401", "403", "409", "500"),
		}},
		"/v1/periods/close-jobs/{id}": map[string]any{"get": map[string]any{
			"operationId": "getCloseJob", "tags": []string{"billing"}, "summary": "A close-all job's progress: closed, skipped, failed tenants",
			"parameters": []any{param("id", "path", "job id", true, str)},
			"responses":  errs(map[string]any{"200": jsonResp("the job", obj)}, "400", "401", "403", "404", "500"),
		}},
		"/v1/reports/billing": map[string]any{"get": map[string]any{
			"operationId": "billingReport", "tags": []string{"billing"},
			"summary": "Month-close report (finance, operator): held GPU-hours (charged), utilised GPU-hours (sessions, not charged), slice and storage GiB-hours, VM-hours and revenue per group; CSV with Accept: text/csv or format=csv",
			"parameters": append([]any{param("group_by", "query", "comma-separated dimensions: tier, gpu_model, tenant, instance_type (default tenant; empty: one total row)", false, str),
				param("format", "query", "json (default) or csv", false, enum("json", "csv"))}, rangeParams...),
			"responses": errs(map[string]any{"200": map[string]any{"description": "the report", "content": map[string]any{
				"application/json": map[string]any{"schema": obj}, "text/csv": map[string]any{"schema": str}}}}, "400", "401", "403", "500"),
		}},
		"/v1/reports/gpu-hours": map[string]any{"get": map[string]any{
			"operationId": "gpuHoursReport", "tags": []string{"billing"},
			"summary": "Utilised GPU-hours (inside CUDA sessions) per tier, GPU model or tenant, per day or month, with that utilisation valued at the price book (finance, operator; not what is invoiced: that is what tenants hold, /v1/reports/billing); CSV with Accept: text/csv or format=csv",
			"parameters": append([]any{param("group_by", "query", "grouping", false, enum("tier", "gpu_model", "tenant")),
				param("granularity", "query", "bucket size", false, enum("day", "month")),
				param("format", "query", "json (default) or csv", false, enum("json", "csv"))}, rangeParams...),
			"responses": errs(map[string]any{"200": map[string]any{"description": "the report", "content": map[string]any{
				"application/json": map[string]any{"schema": obj}, "text/csv": map[string]any{"schema": str}}}}, "400", "401", "403", "500"),
		}},
	}
}
