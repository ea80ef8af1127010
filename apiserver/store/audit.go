package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"gpucloud/internal/authn"
)

// AuditEntry is one change: who did what to which resource.
type AuditEntry struct {
	ID           int64           `json:"id"`
	At           time.Time       `json:"at"`
	ActorUserID  *uuid.UUID      `json:"actor_user_id,omitempty"`
	ActorRole    string          `json:"actor_role"`
	ActorDaemon  *uuid.UUID      `json:"actor_daemon,omitempty"`
	TenantID     *uuid.UUID      `json:"tenant_id,omitempty"`
	Action       string          `json:"action"`
	ResourceType string          `json:"resource_type"`
	ResourceID   string          `json:"resource_id"`
	RequestID    string          `json:"request_id"`
	Detail       json.RawMessage `json:"detail"`
}

type requestIDKey struct{}

// WithRequestID carries the request id to the audit log.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// RequestID returns the request id of ctx, or "".
func RequestID(ctx context.Context) string {
	s, _ := ctx.Value(requestIDKey{}).(string)
	return s
}

func nullable(id uuid.UUID) *uuid.UUID {
	if id == uuid.Nil {
		return nil
	}
	return &id
}

// Audit records a change in q (a transaction, so the record commits with the change). The actor
// comes from ctx; tenant is the tenant the resource belongs to (zero for platform resources).
func Audit(ctx context.Context, q Execer, tenant uuid.UUID, action, resourceType, resourceID string, detail any) error {
	sql, args, err := auditStmt(ctx, tenant, action, resourceType, resourceID, detail)
	if err != nil {
		return err
	}
	if _, err := q.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("audit %s %s: %w", action, resourceType, err)
	}
	return nil
}

// auditStmt is Audit's statement, for callers that batch it with others.
func auditStmt(ctx context.Context, tenant uuid.UUID, action, resourceType, resourceID string, detail any) (string, []any, error) {
	p, _ := authn.FromContext(ctx)
	role := string(p.Role)
	if role == "" {
		role = "system"
	}
	d := []byte("{}")
	if detail != nil {
		var err error
		if d, err = json.Marshal(detail); err != nil {
			return "", nil, fmt.Errorf("audit: encode detail: %w", err)
		}
	}
	return `INSERT INTO audit_log (actor_user_id, actor_role, actor_daemon, tenant_id, action,
		resource_type, resource_id, request_id, detail) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
		[]any{nullable(p.UserID), role, nullable(p.DaemonID), nullable(tenant), action, resourceType, resourceID,
			RequestID(ctx), d}, nil
}

// ListAudit returns entries after cursor (an id), newest last; tenant zero lists all.
func (s *Store) ListAudit(ctx context.Context, tenant uuid.UUID, after int64, limit int) ([]AuditEntry, error) {
	rows, err := s.Pool.Query(ctx, `SELECT id, at, actor_user_id, actor_role, actor_daemon, tenant_id, action,
		resource_type, resource_id, request_id, detail FROM audit_log
		WHERE id > $1 AND ($2::uuid IS NULL OR tenant_id = $2) ORDER BY id LIMIT $3`, after, nullable(tenant), limit)
	if err != nil {
		return nil, fmt.Errorf("list audit: %w", err)
	}
	defer rows.Close()
	var out []AuditEntry
	for rows.Next() {
		var e AuditEntry
		if err := rows.Scan(&e.ID, &e.At, &e.ActorUserID, &e.ActorRole, &e.ActorDaemon, &e.TenantID, &e.Action,
			&e.ResourceType, &e.ResourceID, &e.RequestID, &e.Detail); err != nil {
			return nil, fmt.Errorf("list audit: %w", err)
		}
		out = append(out, e)
	}
	return out, rows.Err()
}
