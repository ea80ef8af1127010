// Package store is the apiserver's data access: a pgx pool for the hot paths (authentication,
// instance create and placement, agent reports) and gorm over the same pool for plain CRUD.
package store

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// Store holds the database handles.
type Store struct {
	Pool  *pgxpool.Pool
	ORM   *gorm.DB
	cache shapeCache
	hosts hostCache
	keys  keyCache
	// listenPID is the credentials listener's backend pid (keylisten.go), 0 while not connected.
	listenPID atomic.Uint32
	revoked   revocationHub // long-polls waiting for revocations (revocations.go)
	// clock dates billing's allocation intervals when set (tests); nil: the transaction's time.
	clock func() time.Time
}

// SetClock makes state transitions date what instances hold by now (tests of billing that need
// hours to pass). Call it before serving.
func (s *Store) SetClock(now func() time.Time) { s.clock = now }

// DefaultMaxConns is the pool size when none is given. pgx's default (the number of CPUs) is far
// too small here: a create spends most of its time waiting on its commit's WAL flush, and
// more transactions in flight let PostgreSQL flush them together (docs/benchmarks/apiserver-creates.md).
const DefaultMaxConns = 32

// Open connects to url with a pool of maxConns connections (0: DefaultMaxConns).
func Open(ctx context.Context, url string, maxConns int32) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("store: parse database url: %w", err)
	}
	if maxConns <= 0 {
		maxConns = DefaultMaxConns
	}
	cfg.MaxConns = maxConns
	cfg.AfterConnect = func(_ context.Context, c *pgx.Conn) error {
		registerUUID(c.TypeMap())
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("store: connect: %w", err)
	}
	orm, err := gorm.Open(postgres.New(postgres.Config{Conn: stdlib.OpenDBFromPool(pool)}),
		&gorm.Config{Logger: logger.Default.LogMode(logger.Silent), SkipDefaultTransaction: true})
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("store: gorm: %w", err)
	}
	return &Store{Pool: pool, ORM: orm}, nil
}

// Close releases the pool.
func (s *Store) Close() { s.Pool.Close() }

// Ping checks the database answers.
func (s *Store) Ping(ctx context.Context) error { return s.Pool.Ping(ctx) }

// NewID returns a time-ordered id, so that ordering by id is ordering by creation.
func NewID() uuid.UUID { return uuid.Must(uuid.NewV7()) }

// InTx runs fn in a transaction, committing when it returns nil.
func (s *Store) InTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, s.Pool, fn)
}

// InSnapshot runs fn in a read-only transaction whose statements all see one snapshot (repeatable
// read): a reader of related rows sees a writer's transaction whole or not at all.
func (s *Store) InSnapshot(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, s.Pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, fn)
}

// ErrNotFound is returned when a row does not exist (or is not visible to the caller).
var ErrNotFound = errors.New("not found")

// IsUniqueViolation reports whether err is a unique constraint violation.
func IsUniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

// IsCheckViolation reports whether err is a check constraint violation.
func IsCheckViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23514"
}

// Execer is what pgx pools and transactions share.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// getByID loads one row by id with gorm; a missing row is ErrNotFound.
func getByID[T any](ctx context.Context, s *Store, id uuid.UUID, what string) (T, error) {
	var v T
	err := s.ORM.WithContext(ctx).Take(&v, "id = ?", id).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return v, ErrNotFound
	}
	if err != nil {
		return v, fmt.Errorf("get %s: %w", what, err)
	}
	return v, nil
}

// listPage loads up to limit rows with ids after after, in id order, narrowed by where (may be nil).
func listPage[T any](ctx context.Context, s *Store, after uuid.UUID, limit int, what string, where func(*gorm.DB) *gorm.DB) ([]T, error) {
	q := s.ORM.WithContext(ctx).Where("id > ?", after)
	if where != nil {
		q = where(q)
	}
	var out []T
	if err := q.Order("id").Limit(limit).Find(&out).Error; err != nil {
		return nil, fmt.Errorf("list %s: %w", what, err)
	}
	return out, nil
}
