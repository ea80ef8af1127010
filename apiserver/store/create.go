package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"gpucloud/apiserver/placement"
)

// Idempotency is an Idempotency-Key claim recorded with a create, and how to render the answer.
type Idempotency struct {
	Principal, Key string
	Hash           []byte
	Status         int
	ContentType    string
	Render         func(Instance) ([]byte, error)
}

// ErrIdempotencyRace: the create's Idempotency-Key is already recorded (an earlier request, or a
// concurrent one that committed first); the caller answers from the record.
var ErrIdempotencyRace = errors.New("idempotency key already recorded")

// CreateInstance validates the type, places and reserves capacity, records the instance as
// pending with its first event and audit entry, and charges the tenant's quota: all in one
// transaction, so a failure at any step leaves nothing reserved.
//
// With idem, the Idempotency-Key record (the rendered answer) is written in the same
// transaction, so the instance and its replayable answer commit together. A key already recorded
// (checked first, or found by a concurrent request's unique-key conflict) is ErrIdempotencyRace.
//
// The common create (at most one GPU) takes two round trips: BEGIN, the key check, the GPU, host
// and quota reservations in one pipelined batch; the rows and COMMIT in another. Anything that
// batch cannot settle (several GPUs, a full or changed host) runs createInTx, one statement at a
// time.
func (s *Store) CreateInstance(ctx context.Context, tenant uuid.UUID, actor string, in NewInstance, idem *Idempotency) (Instance, []byte, error) {
	sh, err := s.shape(ctx, s.Pool, in.InstanceTypeID)
	if err != nil {
		return Instance{}, nil, err
	}
	if err := s.checkImage(ctx, in.Image, sh.DiskGiB); err != nil {
		return Instance{}, nil, err
	}
	req := placement.Request{VCPUs: sh.VCPUs, MemoryMiB: sh.MemoryMiB, DiskGiB: sh.DiskGiB, GPUModelID: sh.ModelID,
		GPUCount: sh.GPUCount, Dedicated: sh.Tier == "dedicated"}
	if !req.Dedicated && req.GPUCount > 0 {
		if req.SliceBytes, err = s.sharedSlice(ctx, s.Pool); err != nil {
			return Instance{}, nil, err
		}
	}
	c := create{tenant: tenant, actor: actor, in: in, sh: sh, req: req, idem: idem}
	if req.GPUCount <= 1 {
		host, err := s.pickHost(ctx)
		if err != nil {
			return Instance{}, nil, err
		}
		if host != uuid.Nil {
			inst, answer, err := s.createBatched(ctx, &c, host)
			if !errors.Is(err, placement.ErrHostContended) {
				return inst, answer, err
			}
			s.forgetHosts()
		}
	}
	return s.createInTx(ctx, &c)
}

// create is one CreateInstance call.
type create struct {
	tenant uuid.UUID
	actor  string
	in     NewInstance
	sh     instanceShape
	req    placement.Request
	idem   *Idempotency
}

// charge is the quota charge of an instance placed at res.
func (c *create) charge(res placement.Result) (gpus, gpuMem int64) {
	return int64(c.req.GPUCount), int64(c.req.GPUCount) * perGPU(res)
}

func perGPU(res placement.Result) int64 {
	if len(res.GPUs) > 0 {
		return res.GPUs[0].Bytes
	}
	return 0
}

// instance is the row recorded for a create placed at res.
func (c *create) instance(res placement.Result) Instance {
	inst := Instance{
		ID: NewID(), TenantID: c.tenant, Name: c.in.Name, InstanceTypeID: c.in.InstanceTypeID, Image: c.in.Image,
		SSHKey: c.in.SSHKey, SSHAuthorizedKeys: c.in.AuthorizedKeys, UserData: c.in.UserData, ForwardPorts: c.in.ForwardPorts, State: StatePending, DesiredState: "running", HostID: res.HostID,
		VCPUs: c.req.VCPUs, MemoryMiB: c.req.MemoryMiB, DiskGiB: c.req.DiskGiB, Tier: c.sh.Tier, GPUCount: c.req.GPUCount,
		GPUMemoryBytes: perGPU(res), GPUModel: c.sh.ModelName,
		// Set here rather than by the database so the answer can be rendered before commit.
		CreatedAt: time.Now().UTC().Truncate(time.Microsecond),
	}
	inst.UpdatedAt = inst.CreatedAt
	if !c.req.Dedicated {
		inst.MemoryQuota = inst.GPUMemoryBytes
	}
	if res.GPUServerID != uuid.Nil {
		inst.GPUServerID = &res.GPUServerID
	}
	inst.Conditions = conditions(inst, nil, nil) // placement picks only ready daemons
	return inst
}

// queueRows adds the create's rows to b: instance, reservations, event, audit entry and, with
// idem, the Idempotency-Key record with the rendered answer (returned).
func (c *create) queueRows(ctx context.Context, b *pgx.Batch, inst Instance, res placement.Result) ([]byte, error) {
	b.Queue(`INSERT INTO instances (id, tenant_id, name, instance_type_id, image, ssh_key, state,
		desired_state, host_id, gpu_server_id, vcpus, memory_mib, disk_gib, tier, gpu_model, gpu_count, gpu_memory_bytes,
		memory_quota, created_at, updated_at, ssh_authorized_keys, user_data, forward_ports)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $19, $20, $21, $22)`,
		inst.ID, inst.TenantID, inst.Name, inst.InstanceTypeID, inst.Image, inst.SSHKey, inst.State, inst.DesiredState,
		inst.HostID, inst.GPUServerID, inst.VCPUs, inst.MemoryMiB, inst.DiskGiB, inst.Tier, inst.GPUModel, inst.GPUCount,
		inst.GPUMemoryBytes, inst.MemoryQuota, inst.CreatedAt, nonNil(inst.SSHAuthorizedKeys), inst.UserData, nonNilInts(inst.ForwardPorts))
	for _, g := range res.GPUs {
		b.Queue(`INSERT INTO gpu_reservations (instance_id, gpu_id, bytes, dedicated) VALUES ($1, $2, $3, $4)`,
			inst.ID, g.ID, g.Bytes, c.req.Dedicated)
	}
	b.Queue(eventSQL, inst.ID, "", StatePending, "", c.actor)
	auditSQL, auditArgs, err := auditStmt(ctx, c.tenant, "create", "instance", inst.ID.String(),
		map[string]any{"name": inst.Name, "instance_type_id": inst.InstanceTypeID, "host_id": inst.HostID})
	if err != nil {
		return nil, err
	}
	b.Queue(auditSQL, auditArgs...)
	if c.idem == nil {
		return nil, nil
	}
	answer, err := c.idem.Render(inst)
	if err != nil {
		return nil, fmt.Errorf("render answer: %w", err)
	}
	b.Queue(`INSERT INTO idempotency_keys (principal, key, request_hash, status, content_type, body)
		VALUES ($1, $2, $3, $4, $5, $6)`, c.idem.Principal, c.idem.Key, c.idem.Hash, c.idem.Status, c.idem.ContentType, answer)
	return answer, nil
}

// queueIdemCheck adds to b a look-up of the create's Idempotency-Key; *found is set once b was read.
func (c *create) queueIdemCheck(b *pgx.Batch, found *bool) {
	if c.idem == nil {
		return
	}
	b.Queue(idemCheckSQL, c.idem.Principal, c.idem.Key).QueryRow(func(row pgx.Row) error {
		var one int
		err := row.Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		*found = err == nil
		return err
	})
}

const idemCheckSQL = `SELECT 1 FROM idempotency_keys WHERE principal = $1 AND key = $2`

// recordErr maps a failed write of the create's rows.
func recordErr(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.ConstraintName == "idempotency_keys_pkey" {
		return ErrIdempotencyRace
	}
	return fmt.Errorf("record instance: %w", err)
}

// createBatched is the two-round-trip create of at most one GPU, on one pooled connection with an
// explicit transaction that spans two pipelined batches.
func (s *Store) createBatched(ctx context.Context, c *create, host uuid.UUID) (Instance, []byte, error) {
	conn, err := s.Pool.Acquire(ctx)
	if err != nil {
		return Instance{}, nil, fmt.Errorf("create instance: %w", err)
	}
	defer conn.Release()
	committed := false
	defer func() {
		if !committed {
			rollback(conn)
		}
	}()

	b := &pgx.Batch{}
	b.Queue("BEGIN")
	var idemFound bool
	c.queueIdemCheck(b, &idemFound)
	q := placement.Queue(b, c.req, host)
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return Instance{}, nil, fmt.Errorf("place instance: %w", err)
	}
	if idemFound {
		return Instance{}, nil, ErrIdempotencyRace
	}
	res, err := q.Result()
	if err != nil {
		return Instance{}, nil, err
	}

	// The quota charge comes first in the second batch, as a statement that fails when the
	// tenant's quota refuses it: after an error PostgreSQL skips the rest of the pipeline, the
	// rows and COMMIT included. The tenant row is locked last (see package placement for the
	// lock order): every create of this tenant queues on it, so it is held for the shortest time.
	inst := c.instance(res)
	gpus, gpuMem := c.charge(res)
	b = &pgx.Batch{}
	b.Queue(chargeOrFailSQL, c.tenant, gpus, gpuMem)
	answer, err := c.queueRows(ctx, b, inst, res)
	if err != nil {
		return Instance{}, nil, err
	}
	b.Queue("COMMIT")
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "22012" { // chargeOrFailSQL's refusal
			rollback(conn)
			return Instance{}, nil, quotaError(ctx, conn, c.tenant, gpus, gpuMem)
		}
		return Instance{}, nil, recordErr(err)
	}
	if conn.Conn().PgConn().TxStatus() != 'I' {
		return Instance{}, nil, errors.New("create instance: transaction did not commit")
	}
	committed = true
	return inst, answer, nil
}

// chargeOrFailSQL is chargeSQL as a statement that fails (division by zero) when the charge
// updated no row, so that it can abort a pipelined transaction.
const chargeOrFailSQL = `WITH charged AS (` + chargeSQL + ` RETURNING 1) SELECT 1 / count(*) FROM charged`

// rollback ends conn's transaction, if any; a connection that cannot is closed, and the pool
// then discards it rather than hand out a connection inside a transaction.
func rollback(conn *pgxpool.Conn) {
	if conn.Conn().IsClosed() || conn.Conn().PgConn().TxStatus() == 'I' {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := conn.Exec(ctx, "ROLLBACK"); err != nil {
		_ = conn.Conn().Close(ctx)
	}
}

// createInTx is the general create, one statement at a time in a transaction.
func (s *Store) createInTx(ctx context.Context, c *create) (Instance, []byte, error) {
	var inst Instance
	var answer []byte
	err := s.InTx(ctx, func(tx pgx.Tx) error {
		if c.idem != nil {
			var one int
			err := tx.QueryRow(ctx, idemCheckSQL, c.idem.Principal, c.idem.Key).Scan(&one)
			if err == nil {
				return ErrIdempotencyRace
			}
			if !errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("check idempotency key: %w", err)
			}
		}
		res, err := placement.Place(ctx, tx, c.req)
		if err != nil {
			return err
		}
		inst = c.instance(res)
		b := &pgx.Batch{}
		if answer, err = c.queueRows(ctx, b, inst, res); err != nil {
			return err
		}
		// The tenant row is locked last (see package placement for the lock order): its lock is
		// the one every create of this tenant queues on, so it is held for the shortest time.
		gpus, gpuMem := c.charge(res)
		charged := false
		b.Queue(chargeSQL, c.tenant, gpus, gpuMem).Exec(func(tag pgconn.CommandTag) error {
			charged = tag.RowsAffected() == 1
			return nil
		})
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return recordErr(err)
		}
		if !charged {
			return quotaError(ctx, tx, c.tenant, gpus, gpuMem)
		}
		return nil
	})
	return inst, answer, err
}

// nonNil makes a nil list the empty array the NOT NULL column wants.
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func nonNilInts(s []int) []int {
	if s == nil {
		return []int{}
	}
	return s
}
