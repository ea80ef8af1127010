// Package placement picks a VM host and GPU capacity for a new instance and reserves them inside
// the caller's transaction, so the reservation commits or rolls back with the instance row.
//
// Concurrency, and why it never oversubscribes:
//   - GPUs are claimed with SELECT ... FOR UPDATE SKIP LOCKED. Concurrent creates take different
//     GPUs instead of queueing on the same row; PostgreSQL re-checks the free-memory condition on
//     the newest committed row version before locking, so a GPU filled by a transaction that just
//     committed is not returned. A GPU held by a transaction still in flight is skipped, which can
//     refuse a request that a moment later would fit: that refusal is reported as retryable.
//   - Hosts are taken with a conditional UPDATE (... WHERE free >= wanted). The UPDATE waits for a
//     concurrent holder of the row and re-evaluates the condition on its committed result, so two
//     transactions can never both fit into the last room on a host. Candidates are shuffled so
//     that concurrent creates spread over hosts rather than queue on one row.
//   - CHECK constraints (gpus.reserved_bytes <= memory_bytes, used <= capacity is enforced by the
//     conditions) are the last line if code ever got this wrong.
//
// Lock order is always GPUs, then the host, then (in the caller) the tenant's quota row, so
// transactions cannot deadlock on each other.
package placement

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Request is what an instance needs.
type Request struct {
	VCPUs, MemoryMiB, DiskGiB int
	GPUModelID                uuid.UUID // zero: no GPU
	GPUCount                  int
	Dedicated                 bool
	SliceBytes                int64 // per GPU, shared tier
}

// GPU is one reserved GPU.
type GPU struct {
	ID    uuid.UUID
	UUID  string
	Bytes int64
}

// Result is where the instance goes.
type Result struct {
	HostID      uuid.UUID
	GPUServerID uuid.UUID // zero when no GPU
	Endpoint    string
	GPUs        []GPU
}

// NoCapacityError says what could not be found; it is retryable (capacity frees up, hosts join).
type NoCapacityError struct{ What string }

func (e *NoCapacityError) Error() string { return "no capacity: " + e.What }

// IsNoCapacity reports whether err is a NoCapacityError.
func IsNoCapacity(err error) bool {
	var e *NoCapacityError
	return errors.As(err, &e)
}

// Place reserves capacity for req in tx.
func Place(ctx context.Context, tx pgx.Tx, req Request) (Result, error) {
	var res Result
	if req.GPUCount > 0 {
		if err := placeGPUs(ctx, tx, req, &res); err != nil {
			return res, err
		}
	}
	hostID, err := placeHost(ctx, tx, req)
	if err != nil {
		return res, err
	}
	res.HostID = hostID
	return res, nil
}

func placeGPUs(ctx context.Context, tx pgx.Tx, req Request, res *Result) error {
	if req.GPUCount == 1 {
		var g GPU
		var srv uuid.UUID
		var endpoint string
		sql, args := oneGPU(req)
		err := tx.QueryRow(ctx, sql, args...).Scan(&g.ID, &g.UUID, &g.Bytes, &srv, &endpoint)
		if errors.Is(err, pgx.ErrNoRows) {
			return noGPU(req)
		}
		if err != nil {
			return fmt.Errorf("placement: reserve GPU: %w", err)
		}
		res.GPUServerID, res.Endpoint, res.GPUs = srv, endpoint, []GPU{g}
		return nil
	}
	cond, need := gpuCond(req)
	rows, err := tx.Query(ctx, `SELECT g.gpu_server_id `+eligible+cond+`
		GROUP BY g.gpu_server_id HAVING count(*) >= $3 ORDER BY random() LIMIT 8`,
		req.GPUModelID, need, req.GPUCount)
	if err != nil {
		return fmt.Errorf("placement: candidate GPU servers: %w", err)
	}
	servers, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return fmt.Errorf("placement: candidate GPU servers: %w", err)
	}
	for _, srv := range servers {
		// Shared slices pack onto the fullest GPU that still fits, keeping whole GPUs free for
		// dedicated instances.
		rows, err := tx.Query(ctx, `SELECT g.id, g.uuid, g.memory_bytes, s.endpoint `+eligible+cond+`
			AND g.gpu_server_id = $4
			ORDER BY g.reserved_bytes DESC, g.idx LIMIT $3 FOR UPDATE OF g SKIP LOCKED`,
			req.GPUModelID, need, req.GPUCount, srv)
		if err != nil {
			return fmt.Errorf("placement: lock GPUs: %w", err)
		}
		var gpus []GPU
		var endpoint string
		for rows.Next() {
			var g GPU
			var mem int64
			if err := rows.Scan(&g.ID, &g.UUID, &mem, &endpoint); err != nil {
				rows.Close()
				return fmt.Errorf("placement: lock GPUs: %w", err)
			}
			g.Bytes = req.SliceBytes
			if req.Dedicated {
				g.Bytes = mem
			}
			gpus = append(gpus, g)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("placement: lock GPUs: %w", err)
		}
		if len(gpus) < req.GPUCount {
			continue
		}
		for _, g := range gpus {
			if _, err := tx.Exec(ctx, `UPDATE gpus SET reserved_bytes = reserved_bytes + $2 WHERE id = $1`, g.ID, g.Bytes); err != nil {
				return fmt.Errorf("placement: reserve GPU %s: %w", g.UUID, err)
			}
		}
		res.GPUServerID, res.Endpoint, res.GPUs = srv, endpoint, gpus
		return nil
	}
	return &NoCapacityError{What: fmt.Sprintf("%d free GPU(s) of the requested model and tier", req.GPUCount)}
}

// eligible selects the GPUs (alias g) of $1's model on usable GPU servers (alias s); gpuCond's
// condition follows it.
const eligible = `FROM gpus g JOIN gpu_servers s ON s.id = g.gpu_server_id
	WHERE g.gpu_model_id = $1 AND g.healthy AND s.status = 'ready' AND NOT s.cordoned
	  AND NOT s.draining AND s.deleted_at IS NULL AND `

// gpuCond is the fit condition on $2: dedicated needs an untouched GPU; shared needs a slice of
// free memory.
func gpuCond(req Request) (string, int64) {
	if req.Dedicated {
		return "g.reserved_bytes = 0 AND $2::bigint = 0", 0
	}
	return "g.memory_bytes - g.reserved_bytes >= $2::bigint", req.SliceBytes
}

// oneGPU is the common case, in one statement: take the first GPU not locked by a concurrent
// create, walking for a shared slice the gpus_fit index from the GPU with the least free memory
// that still fits (packing slices, keeping whole GPUs free), for a dedicated GPU the untouched
// ones of gpus_pack. It returns the GPU's id, uuid, reserved bytes, server and endpoint.
func oneGPU(req Request) (string, []any) {
	cond, need := gpuCond(req)
	order := "g.memory_bytes - g.reserved_bytes"
	if req.Dedicated {
		order = "g.reserved_bytes DESC"
	}
	return `UPDATE gpus SET reserved_bytes = CASE WHEN $3 THEN memory_bytes ELSE reserved_bytes + $2 END
		WHERE id = (SELECT g.id ` + eligible + cond + ` ORDER BY ` + order + ` LIMIT 1 FOR UPDATE OF g SKIP LOCKED)
		RETURNING id, uuid, CASE WHEN $3 THEN memory_bytes ELSE $2 END, gpu_server_id,
		  (SELECT endpoint FROM gpu_servers WHERE id = gpus.gpu_server_id)`, []any{req.GPUModelID, need, req.Dedicated}
}

func noGPU(req Request) error {
	if req.GPUCount == 1 {
		return &NoCapacityError{What: "a free GPU of the requested model and tier"}
	}
	return noGPU(req)
}

const hostFits = `status = 'ready' AND NOT cordoned AND NOT draining AND deleted_at IS NULL
	AND vcpus - used_vcpus >= $1 AND memory_mib - used_memory_mib >= $2 AND disk_gib - used_disk_gib >= $3`

// anyHost reserves room on a random host that fits, in one statement; no row when none fits or a
// concurrent create took the chosen host's last room.
const anyHost = `UPDATE hosts SET used_vcpus = used_vcpus + $1, used_memory_mib = used_memory_mib + $2,
	used_disk_gib = used_disk_gib + $3
	WHERE id = (SELECT id FROM hosts WHERE ` + hostFits + ` ORDER BY random() LIMIT 1) AND ` + hostFits + ` RETURNING id`

func placeHost(ctx context.Context, tx pgx.Tx, req Request) (uuid.UUID, error) {
	// First try, in one statement: a random host that fits. Only when a concurrent create took
	// its last room (the re-checked condition fails) do we walk the candidates one by one.
	var id uuid.UUID
	err := tx.QueryRow(ctx, anyHost, req.VCPUs, req.MemoryMiB, req.DiskGiB).Scan(&id)
	if err == nil {
		return id, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return uuid.Nil, fmt.Errorf("placement: reserve host: %w", err)
	}
	rows, err := tx.Query(ctx, `SELECT id FROM hosts
		WHERE status = 'ready' AND NOT cordoned AND NOT draining AND deleted_at IS NULL
		  AND vcpus - used_vcpus >= $1 AND memory_mib - used_memory_mib >= $2 AND disk_gib - used_disk_gib >= $3
		ORDER BY vcpus - used_vcpus DESC LIMIT 8`, req.VCPUs, req.MemoryMiB, req.DiskGiB)
	if err != nil {
		return uuid.Nil, fmt.Errorf("placement: candidate hosts: %w", err)
	}
	hosts, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return uuid.Nil, fmt.Errorf("placement: candidate hosts: %w", err)
	}
	rand.Shuffle(len(hosts), func(i, j int) { hosts[i], hosts[j] = hosts[j], hosts[i] })
	for _, h := range hosts {
		tag, err := tx.Exec(ctx, `UPDATE hosts SET used_vcpus = used_vcpus + $2,
			used_memory_mib = used_memory_mib + $3, used_disk_gib = used_disk_gib + $4
			WHERE id = $1 AND status = 'ready' AND NOT cordoned AND NOT draining AND deleted_at IS NULL
			  AND vcpus - used_vcpus >= $2 AND memory_mib - used_memory_mib >= $3 AND disk_gib - used_disk_gib >= $4`,
			h, req.VCPUs, req.MemoryMiB, req.DiskGiB)
		if err != nil {
			return uuid.Nil, fmt.Errorf("placement: reserve host: %w", err)
		}
		if tag.RowsAffected() == 1 {
			return h, nil
		}
	}
	return uuid.Nil, &NoCapacityError{What: "a host with room for the VM"}
}

// PlaceGPUs reserves GPUs alone in tx: a drain's move keeps the instance's VM host and takes GPUs
// on another GPU server (the draining one is not eligible).
func PlaceGPUs(ctx context.Context, tx pgx.Tx, req Request) (Result, error) {
	var res Result
	err := placeGPUs(ctx, tx, req, &res)
	return res, err
}

// PlaceHost reserves room for the VM alone in tx: a host drain's move keeps the instance's GPUs
// and takes room on another host (the draining one is not eligible).
func PlaceHost(ctx context.Context, tx pgx.Tx, req Request) (uuid.UUID, error) {
	return placeHost(ctx, tx, req)
}
