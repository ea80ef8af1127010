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
			"summary": "Push a batch of up to 1,000 usage records (daemons); each is stored exactly once by id",
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
			"summary": "GPU-hours and revenue per tier, GPU model or tenant, per day or month (finance, operator); CSV with Accept: text/csv or format=csv",
			"parameters": append([]any{param("group_by", "query", "grouping", false, enum("tier", "gpu_model", "tenant")),
				param("granularity", "query", "bucket size", false, enum("day", "month")),
				param("format", "query", "json (default) or csv", false, enum("json", "csv"))}, rangeParams...),
			"responses": errs(map[string]any{"200": map[string]any{"description": "the report", "content": map[string]any{
				"application/json": map[string]any{"schema": obj}, "text/csv": map[string]any{"schema": str}}}}, "400", "401", "403", "500"),
		}},
	}
}
