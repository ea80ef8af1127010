package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"gpucloud/internal/authn"
)

// PrefixConsoleTicket marks a console ticket (accepted only by the console's WebSocket).
const PrefixConsoleTicket = "gck_"

// ConsoleTicketTTL is how long a ticket waits to be used: the client opens the WebSocket at once.
const ConsoleTicketTTL = 30 * time.Second

// ConsoleTicket opens one interactive console session.
type ConsoleTicket struct {
	Ticket    string    `json:"ticket"`
	ExpiresAt time.Time `json:"expires_at"`
}

// ConsoleTarget is what a redeemed ticket opens: an instance on its host, for whom.
type ConsoleTarget struct {
	InstanceID uuid.UUID
	TenantID   uuid.UUID
	HostID     uuid.UUID
	ConsoleURL string // the host's console endpoint; "" when it serves none
	State      string // the instance's state
	Principal  authn.Principal
}

// CreateConsoleTicket issues a ticket for the caller to open instance id's console (tenant
// zero: any tenant's instance). Expired tickets are swept on the way.
func (s *Store) CreateConsoleTicket(ctx context.Context, tenant, id uuid.UUID) (ConsoleTicket, error) {
	p, _ := authn.FromContext(ctx)
	secret, hash := NewSecret(PrefixConsoleTicket)
	out := ConsoleTicket{Ticket: secret}
	err := s.InTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM console_tickets WHERE expires_at < now()`); err != nil {
			return fmt.Errorf("sweep console tickets: %w", err)
		}
		err := tx.QueryRow(ctx, `INSERT INTO console_tickets (ticket_hash, instance_id, tenant_id, user_id, role, expires_at)
			SELECT $1, id, tenant_id, $3, $4, now() + $5::interval FROM instances
			WHERE id = $2 AND ($6::uuid IS NULL OR tenant_id = $6) AND state <> 'deleted'
			RETURNING expires_at`, hash, id, nullable(p.UserID), string(p.Role),
			fmt.Sprintf("%d seconds", int(ConsoleTicketTTL/time.Second)), nullable(tenant)).Scan(&out.ExpiresAt)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("create console ticket: %w", err)
		}
		return nil
	})
	return out, err
}

// RedeemConsoleTicket uses up a ticket for instance id and returns what it opens. An unknown,
// used or expired ticket, or one for another instance, is ErrNotFound (and a ticket presented
// for the wrong instance is used up all the same).
func (s *Store) RedeemConsoleTicket(ctx context.Context, id uuid.UUID, ticket string) (ConsoleTarget, error) {
	var t ConsoleTarget
	var user *uuid.UUID
	var role string
	err := s.Pool.QueryRow(ctx, `WITH used AS (
			DELETE FROM console_tickets WHERE ticket_hash = $1 RETURNING instance_id, tenant_id, user_id, role, expires_at)
		SELECT i.id, i.tenant_id, i.host_id, h.console_url, i.state, used.user_id, used.role
		FROM used JOIN instances i ON i.id = used.instance_id AND i.tenant_id = used.tenant_id
		JOIN hosts h ON h.id = i.host_id
		WHERE used.instance_id = $2 AND used.expires_at > now()`, HashSecret(ticket), id).
		Scan(&t.InstanceID, &t.TenantID, &t.HostID, &t.ConsoleURL, &t.State, &user, &role)
	if errors.Is(err, pgx.ErrNoRows) {
		return t, ErrNotFound
	}
	if err != nil {
		return t, fmt.Errorf("redeem console ticket: %w", err)
	}
	t.Principal = authn.Principal{Role: authn.Role(role)}
	if user != nil {
		t.Principal.UserID = *user
	}
	if t.Principal.Role == authn.RoleTenantAdmin || t.Principal.Role == authn.RoleTenantMember {
		t.Principal.TenantID = t.TenantID
	}
	return t, nil
}

// AuditConsole records a console session's opening or closing (action "console-open" or
// "console-close") as the ticket's holder, whose principal ctx carries.
func (s *Store) AuditConsole(ctx context.Context, t ConsoleTarget, action string, detail any) error {
	return Audit(authn.WithPrincipal(ctx, t.Principal), s.Pool, t.TenantID, action, "instance", t.InstanceID.String(), detail)
}
