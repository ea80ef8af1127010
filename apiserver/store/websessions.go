package store

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"golang.org/x/crypto/bcrypt"

	"gpucloud/internal/authn"
)

// PrefixWebSession marks a console session cookie value (never accepted as a bearer credential).
const PrefixWebSession = "gcs_"

// bcryptCost is bcrypt's default: about 50-100 ms per check on one core, paid only at sign-in.
const bcryptCost = bcrypt.DefaultCost

// ErrBadPassword is returned for an unknown e-mail or a wrong password alike, so sign-in does
// not reveal which e-mails exist.
var ErrBadPassword = errors.New("wrong e-mail or password")

// dummyHash is compared against when the e-mail is unknown, so both failures take as long.
var dummyHash, _ = bcrypt.GenerateFromPassword([]byte("gpucloud-no-such-user"), bcryptCost)

// WebSession is a signed-in browser.
type WebSession struct {
	Secret    string // the cookie value; only its hash is stored
	CSRFToken string
	ExpiresAt time.Time
	User      User
}

// SetPassword sets (or replaces) the user's password and ends their other sessions.
func (s *Store) SetPassword(ctx context.Context, user User, password string) error {
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcryptCost)
	if err != nil {
		return fmt.Errorf("hash password: %w", err)
	}
	tenant := uuid.Nil
	if user.TenantID != nil {
		tenant = *user.TenantID
	}
	return s.InTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO user_passwords (user_id, hash) VALUES ($1, $2)
			ON CONFLICT (user_id) DO UPDATE SET hash = EXCLUDED.hash, updated_at = now()`, user.ID, hash); err != nil {
			return fmt.Errorf("set password of %s: %w", user.ID, err)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM web_sessions WHERE user_id = $1`, user.ID); err != nil {
			return fmt.Errorf("end sessions of %s: %w", user.ID, err)
		}
		return Audit(ctx, tx, tenant, "set-password", "user", user.ID.String(), nil)
	})
}

// HasPassword reports whether the user has a password set.
func (s *Store) HasPassword(ctx context.Context, userID uuid.UUID) (bool, error) {
	var n int
	err := s.Pool.QueryRow(ctx, `SELECT count(*) FROM user_passwords WHERE user_id = $1`, userID).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("password of %s: %w", userID, err)
	}
	return n > 0, nil
}

// CheckPassword returns the user with that e-mail if password is theirs, else ErrBadPassword.
func (s *Store) CheckPassword(ctx context.Context, email, password string) (User, error) {
	var (
		u    User
		hash []byte
	)
	err := s.Pool.QueryRow(ctx, `SELECT u.id, u.tenant_id, u.email, u.role, u.created_at, p.hash
		FROM users u JOIN user_passwords p ON p.user_id = u.id WHERE lower(u.email) = lower($1)`, strings.TrimSpace(email)).
		Scan(&u.ID, &u.TenantID, &u.Email, &u.Role, &u.CreatedAt, &hash)
	if errors.Is(err, pgx.ErrNoRows) {
		_ = bcrypt.CompareHashAndPassword(dummyHash, []byte(password))
		return User{}, ErrBadPassword
	}
	if err != nil {
		return User{}, fmt.Errorf("check password: %w", err)
	}
	if bcrypt.CompareHashAndPassword(hash, []byte(password)) != nil {
		return User{}, ErrBadPassword
	}
	return u, nil
}

// CreateWebSession signs user in for ttl.
func (s *Store) CreateWebSession(ctx context.Context, user User, ttl time.Duration) (WebSession, error) {
	secret, hash := NewSecret(PrefixWebSession)
	csrf, _ := NewSecret("")
	ws := WebSession{Secret: secret, CSRFToken: csrf, ExpiresAt: time.Now().Add(ttl).UTC().Truncate(time.Second), User: user}
	// Expired rows of this user go on the way, so the table does not grow without bound.
	_, err := s.Pool.Exec(ctx, `WITH gone AS (DELETE FROM web_sessions WHERE user_id = $2 AND expires_at < now())
		INSERT INTO web_sessions (hash, user_id, csrf_token, expires_at) VALUES ($1, $2, $3, $4)`,
		hash, user.ID, csrf, ws.ExpiresAt)
	if err != nil {
		return ws, fmt.Errorf("create web session: %w", err)
	}
	return ws, nil
}

// AuthenticateWebSession resolves a session cookie and checks csrf (when checkCSRF) against the
// session's token. Unknown, expired or mismatched sessions are ErrNotFound.
func (s *Store) AuthenticateWebSession(ctx context.Context, secret, csrf string, checkCSRF bool) (Credential, error) {
	var (
		c      Credential
		tenant *uuid.UUID
		role   string
		token  string
	)
	if !strings.HasPrefix(secret, PrefixWebSession) || len(secret) > 256 {
		return c, ErrNotFound
	}
	err := s.Pool.QueryRow(ctx, `SELECT u.id, u.tenant_id, u.role, w.csrf_token FROM web_sessions w
		JOIN users u ON u.id = w.user_id WHERE w.hash = $1 AND w.expires_at > now()`, HashSecret(secret)).
		Scan(&c.Principal.UserID, &tenant, &role, &token)
	if errors.Is(err, pgx.ErrNoRows) {
		return c, ErrNotFound
	}
	if err != nil {
		return c, fmt.Errorf("authenticate web session: %w", err)
	}
	if checkCSRF && subtle.ConstantTimeCompare([]byte(csrf), []byte(token)) != 1 {
		return c, ErrCSRF
	}
	c.Principal.Role = authn.Role(role)
	if tenant != nil {
		c.Principal.TenantID = *tenant
	}
	return c, nil
}

// ErrCSRF is a session used for an unsafe request without its CSRF token.
var ErrCSRF = errors.New("missing or wrong CSRF token")

// DeleteWebSession signs a browser out.
func (s *Store) DeleteWebSession(ctx context.Context, secret string) error {
	if _, err := s.Pool.Exec(ctx, `DELETE FROM web_sessions WHERE hash = $1`, HashSecret(secret)); err != nil {
		return fmt.Errorf("delete web session: %w", err)
	}
	return nil
}
