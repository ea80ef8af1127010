package placement

import (
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// ErrHostContended: the host given to Queue could not take the instance (full, perhaps by a
// concurrent create, or no longer usable); the caller rolls back and places again with Place,
// which walks the current candidates.
var ErrHostContended = errors.New("placement: the chosen host cannot take the instance")

// Queued is a placement sent in a pgx batch with the statements around it, so that placing costs
// no round trip of its own. Its result is known once the batch has been read.
type Queued struct {
	req       Request
	res       Result
	gpu, host bool
}

// Queue adds to b the reservation of req on host (picked by the caller, re-checked here), GPU
// first and then the host (the package's lock order), and returns nil when req needs more than one GPU: multi-GPU placement walks candidate
// servers and needs Place. Both statements run even if the first finds nothing; the caller rolls
// the transaction back then.
func Queue(b *pgx.Batch, req Request, host uuid.UUID) *Queued {
	if req.GPUCount > 1 {
		return nil
	}
	q := &Queued{req: req}
	if req.GPUCount == 1 {
		sql, args := oneGPU(req)
		b.Queue(sql, args...).QueryRow(func(row pgx.Row) error {
			var g GPU
			err := row.Scan(&g.ID, &g.UUID, &g.Bytes, &q.res.GPUServerID, &q.res.Endpoint)
			if errors.Is(err, pgx.ErrNoRows) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("placement: reserve GPU: %w", err)
			}
			q.gpu, q.res.GPUs = true, []GPU{g}
			return nil
		})
	}
	b.Queue(thisHost, req.VCPUs, req.MemoryMiB, req.DiskGiB, host).QueryRow(func(row pgx.Row) error {
		err := row.Scan(&q.res.HostID)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("placement: reserve host: %w", err)
		}
		q.host = true
		return nil
	})
	return q
}

// thisHost reserves room on host $4 if it is usable and fits.
const thisHost = `UPDATE hosts SET used_vcpus = used_vcpus + $1, used_memory_mib = used_memory_mib + $2,
	used_disk_gib = used_disk_gib + $3 WHERE id = $4 AND ` + hostFits + ` RETURNING id`

// Result is the placement once the batch was read without error: a NoCapacityError when no GPU
// fits, ErrHostContended when the host statement found no row.
func (q *Queued) Result() (Result, error) {
	if q.req.GPUCount == 1 && !q.gpu {
		return q.res, noGPU(q.req)
	}
	if !q.host {
		return q.res, ErrHostContended
	}
	return q.res, nil
}
