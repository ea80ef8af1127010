package sdk

import (
	"context"
	"net/url"
	"time"
)

// Balance is a tenant's running balance: prepaid credit left minus what it held and has not
// yet been invoiced for (cents).
type Balance struct {
	TenantID         string    `json:"tenant_id"`
	At               time.Time `json:"at"`
	CreditCents      int64     `json:"credit_cents"`
	UnbilledCents    int64     `json:"unbilled_cents"`
	MonthToDateCents int64     `json:"month_to_date_cents"`
	BalanceCents     int64     `json:"balance_cents"`
	Balance          string    `json:"balance"`
	Unpriced         []string  `json:"unpriced,omitempty"`
	Currency         string    `json:"currency"`
}

// BalanceAnswer is GET /v1/balance: the balance and the budget, if one is set.
type BalanceAnswer struct {
	Balance Balance `json:"balance"`
	Budget  *Budget `json:"budget,omitempty"`
}

// GetBalance returns the caller's tenant's balance (platform roles: tenantID's).
func (c *Client) GetBalance(ctx context.Context, tenantID string) (BalanceAnswer, error) {
	return do[BalanceAnswer](ctx, c, request{op: opGetBalance, query: tenantQuery(tenantID)})
}

func tenantQuery(tenantID string) url.Values {
	q := url.Values{}
	if tenantID != "" {
		q.Set("tenant_id", tenantID)
	}
	return q
}

// CreditGrant is prepaid credit of a tenant, drawn at period close by Priority (lower first),
// then soonest expiry.
type CreditGrant struct {
	ID             string     `json:"id"`
	TenantID       string     `json:"tenant_id"`
	AmountCents    int64      `json:"amount_cents"`
	RemainingCents int64      `json:"remaining_cents"`
	Priority       int        `json:"priority"`
	ExpiresAt      *time.Time `json:"expires_at,omitempty"`
	Note           string     `json:"note,omitempty"`
	CreatedAt      time.Time  `json:"created_at"`
}

// AddCreditRequest grants credit (finance). Priority nil is 100.
type AddCreditRequest struct {
	TenantID    string     `json:"tenant_id"`
	AmountCents int64      `json:"amount_cents"`
	Priority    *int       `json:"priority,omitempty"`
	ExpiresAt   *time.Time `json:"expires_at,omitempty"`
	Note        string     `json:"note,omitempty"`
}

// AddCredit grants prepaid credit (finance).
func (c *Client) AddCredit(ctx context.Context, r AddCreditRequest) (CreditGrant, error) {
	return do[CreditGrant](ctx, c, request{op: opAddCredit, body: r})
}

// ListCredits lists credit grants (tenants: their own; platform roles: tenantID's or all).
func (c *Client) ListCredits(ctx context.Context, tenantID string) (Page[CreditGrant], error) {
	return listPage[CreditGrant](ctx, c, opListCredits, tenantQuery(tenantID))
}

// Budget is a tenant's monthly budget: alerts at Thresholds (percent of LimitCents) and HardStop
// (none, block_create, stop_instances) when prepaid credit is exhausted.
type Budget struct {
	TenantID   string    `json:"tenant_id"`
	LimitCents int64     `json:"limit_cents"`
	Thresholds []int     `json:"thresholds"`
	HardStop   string    `json:"hard_stop"`
	UpdatedAt  time.Time `json:"updated_at,omitzero"`
}

// SetBudgetRequest sets a budget; nil Thresholds are 50, 80, 100; empty HardStop is none.
type SetBudgetRequest struct {
	LimitCents int64  `json:"limit_cents"`
	Thresholds []int  `json:"thresholds,omitempty"`
	HardStop   string `json:"hard_stop,omitempty"`
}

// GetBudget returns the tenant's budget (platform roles: tenantID's).
func (c *Client) GetBudget(ctx context.Context, tenantID string) (Budget, error) {
	return do[Budget](ctx, c, request{op: opGetBudget, query: tenantQuery(tenantID)})
}

// SetBudget sets the tenant's budget (tenant admin: its own; finance: tenantID's).
func (c *Client) SetBudget(ctx context.Context, tenantID string, r SetBudgetRequest) (Budget, error) {
	return do[Budget](ctx, c, request{op: opPutBudget, query: tenantQuery(tenantID), body: r})
}

// Webhook is a registered endpoint. Secret is set only in CreateWebhook's answer.
type Webhook struct {
	ID        string    `json:"id"`
	TenantID  *string   `json:"tenant_id"`
	URL       string    `json:"url"`
	Events    []string  `json:"events"`
	Secret    string    `json:"secret,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// CreateWebhookRequest registers an endpoint for Events (budget.threshold, credit.low,
// invoice.closed, instance.failed, instance.state); TenantID is finance's choice (empty: all).
type CreateWebhookRequest struct {
	URL      string   `json:"url"`
	Events   []string `json:"events"`
	TenantID string   `json:"tenant_id,omitempty"`
}

// CreateWebhook registers an endpoint; keep its Secret to verify deliveries.
func (c *Client) CreateWebhook(ctx context.Context, r CreateWebhookRequest) (Webhook, error) {
	return do[Webhook](ctx, c, request{op: opCreateWebhook, body: r})
}

// ListWebhooks lists endpoints (tenants: their own).
func (c *Client) ListWebhooks(ctx context.Context, tenantID string) (Page[Webhook], error) {
	return listPage[Webhook](ctx, c, opListWebhooks, tenantQuery(tenantID))
}

// DeleteWebhook stops an endpoint.
func (c *Client) DeleteWebhook(ctx context.Context, id string) error {
	return c.call(ctx, request{op: opDeleteWebhook, args: []string{id}})
}

// WebhookDelivery is one entry of an endpoint's delivery log.
type WebhookDelivery struct {
	ID            int64      `json:"id"`
	WebhookID     string     `json:"webhook_id"`
	EventID       string     `json:"event_id"`
	EventType     string     `json:"event_type"`
	Status        string     `json:"status"`
	Attempts      int        `json:"attempts"`
	NextAttemptAt time.Time  `json:"next_attempt_at"`
	LastStatus    int        `json:"last_status"`
	LastError     string     `json:"last_error,omitempty"`
	CreatedAt     time.Time  `json:"created_at"`
	DeliveredAt   *time.Time `json:"delivered_at,omitempty"`
}

// ListWebhookDeliveries returns a page of an endpoint's delivery log, newest first.
func (c *Client) ListWebhookDeliveries(ctx context.Context, id string, o ListOptions) (Page[WebhookDelivery], error) {
	return listPage[WebhookDelivery](ctx, c, opListDeliveries, o.values(), id)
}

// CloseJob is the durable job closing a month for every tenant.
type CloseJob struct {
	ID         string     `json:"id"`
	Period     string     `json:"period"`
	Status     string     `json:"status"` // running, done
	Closed     int        `json:"closed"`
	Skipped    int        `json:"skipped"`
	Failed     int        `json:"failed"`
	LastError  string     `json:"last_error,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

// CloseAllPeriods starts (or finds) the job closing period (YYYY-MM) for every tenant (finance).
func (c *Client) CloseAllPeriods(ctx context.Context, period string) (CloseJob, error) {
	return do[CloseJob](ctx, c, request{op: opCloseAll, body: map[string]string{"period": period}})
}

// GetCloseJob returns a close-all job's progress.
func (c *Client) GetCloseJob(ctx context.Context, id string) (CloseJob, error) {
	return do[CloseJob](ctx, c, request{op: opGetCloseJob, args: []string{id}})
}
