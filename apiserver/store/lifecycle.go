package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"gpucloud/api"
	"gpucloud/billing/meter"
	"gpucloud/billing/webhook"
)

// StateError is an action or report that the instance's current state does not allow.
type StateError struct{ State, Action string }

func (e *StateError) Error() string {
	return fmt.Sprintf("cannot %s an instance that is %s", e.Action, e.State)
}

// Act applies a tenant's action (start, stop, reboot, delete) to an instance of tenant (zero: any).
// Repeating an action already under way is a no-op that returns the instance.
func (s *Store) Act(ctx context.Context, tenant, id uuid.UUID, action, actor string) (Instance, error) {
	var out Instance
	err := s.InTx(ctx, func(tx pgx.Tx) error {
		inst, err := lockInstance(ctx, tx, `id = $1 AND ($2::uuid IS NULL OR tenant_id = $2)`, id, nullable(tenant))
		if err != nil {
			return err
		}
		var to, desired string
		switch action {
		case "start":
			switch inst.State {
			case StateStopped:
				to, desired = StatePending, "running"
			case StatePending, StateProvisioning, StateRunning:
				out = inst
				return nil
			}
		case "stop":
			switch inst.State {
			case StatePending, StateProvisioning, StateRunning:
				to, desired = StateStopping, "stopped"
			case StateStopping, StateStopped:
				out = inst
				return nil
			}
		case "reboot":
			if inst.State == StateRunning {
				if err := tx.QueryRow(ctx, `UPDATE instances SET reboot_generation = reboot_generation + 1, updated_at = now()
					WHERE id = $1 RETURNING reboot_generation, updated_at`, id).Scan(&inst.RebootGeneration, &inst.UpdatedAt); err != nil {
					return fmt.Errorf("reboot: %w", err)
				}
				if err := recordEvent(ctx, tx, id, StateRunning, StateRunning, "reboot requested", actor); err != nil {
					return err
				}
				out = inst
				return Audit(ctx, tx, inst.TenantID, "reboot", "instance", id.String(), nil)
			}
		case "delete":
			switch inst.State {
			case StateDeleting, StateDeleted:
				out = inst
				return nil
			default:
				to, desired = StateDeleting, "deleted"
				if inst.Released {
					to = StateDeleted // nothing left on its host to tear down
				}
			}
		default:
			return fmt.Errorf("unknown action %q", action)
		}
		if to == "" {
			return &StateError{State: inst.State, Action: action}
		}
		if err := setState(ctx, tx, s.clock, &inst, to, desired, "", actor); err != nil {
			return err
		}
		out = inst
		return Audit(ctx, tx, inst.TenantID, action, "instance", id.String(), nil)
	})
	if err != nil {
		return out, err
	}
	one := []Instance{out}
	if err := withConditions(ctx, s.Pool, one); err != nil {
		return out, err
	}
	return one[0], nil
}

func lockInstance(ctx context.Context, tx pgx.Tx, where string, args ...any) (Instance, error) {
	inst, err := scanInstance(tx.QueryRow(ctx, `SELECT `+instanceCols+` FROM instances WHERE `+where+` FOR UPDATE`, args...))
	if errors.Is(err, pgx.ErrNoRows) {
		return inst, ErrNotFound
	}
	if err != nil {
		return inst, fmt.Errorf("lock instance: %w", err)
	}
	return inst, nil
}

// setState moves inst to state to and records the event and, in the same transaction, what the
// instance holds from now on (billing's allocation intervals): a committed transition is metered
// exactly once, a rolled-back one not at all. clock, when not nil, dates the allocation (tests);
// otherwise it is the transaction's time, the event's own.
func setState(ctx context.Context, tx pgx.Tx, clock func() time.Time, inst *Instance, to, desired, reason, actor string) error {
	if desired == "" {
		desired = inst.DesiredState
	}
	if err := tx.QueryRow(ctx, `UPDATE instances SET state = $2, desired_state = $3, failure_reason = $4, updated_at = now()
		WHERE id = $1 RETURNING updated_at`, inst.ID, to, desired, reason).Scan(&inst.UpdatedAt); err != nil {
		return fmt.Errorf("set state %s: %w", to, err)
	}
	if err := recordEvent(ctx, tx, inst.ID, inst.State, to, reason, actor); err != nil {
		return err
	}
	at := inst.UpdatedAt
	if clock != nil {
		at = clock()
	}
	if err := meter.Transition(ctx, tx, inst.ID, to, at); err != nil {
		return err
	}
	if to == StateDeleted {
		if err := detachAll(ctx, tx, inst.ID); err != nil {
			return err
		}
	}
	if err := notifyState(ctx, tx, inst, to, reason, at); err != nil {
		return err
	}
	inst.State, inst.DesiredState, inst.FailureReason = to, desired, reason
	return nil
}

// notifyState queues the tenant's instance.state webhook (and instance.failed for a failure) in
// the transition's transaction: the event exists exactly when the transition does.
func notifyState(ctx context.Context, tx pgx.Tx, inst *Instance, to, reason string, at time.Time) error {
	data := map[string]any{"instance_id": inst.ID, "name": inst.Name, "from": inst.State, "to": to, "reason": reason}
	if err := webhook.Enqueue(ctx, tx, inst.TenantID, webhook.InstanceState, at, data); err != nil {
		return err
	}
	if to == StateFailed {
		return webhook.Enqueue(ctx, tx, inst.TenantID, webhook.InstanceFailed, at, data)
	}
	return nil
}

// observedFrom says from which states a host's observation moves an instance to that state.
// Reports that arrive while a stop or delete is under way are not applied: the host has not yet
// seen the new desired state and will report again.
var observedFrom = map[string][]string{
	api.ObservedProvisioning: {StatePending},
	api.ObservedRunning:      {StatePending, StateProvisioning, StateStopped},
	api.ObservedStopped:      {StatePending, StateProvisioning, StateRunning, StateStopping},
	api.ObservedDeleted:      {StateDeleting},
	api.ObservedFailed:       {StatePending, StateProvisioning, StateRunning, StateStopping, StateStopped},
}

// ValidObserved reports whether s is a state a host may report.
func ValidObserved(s string) bool { _, ok := observedFrom[s]; return ok }

// Observe applies a host's report about one of its instances and returns the resulting instance.
// The host must be the one the instance is placed on (else ErrNotFound).
func (s *Store) Observe(ctx context.Context, host, id uuid.UUID, obs api.InstanceObserved) (Instance, error) {
	var out Instance
	err := s.InTx(ctx, func(tx pgx.Tx) error {
		inst, err := lockInstance(ctx, tx, `id = $1 AND host_id = $2`, id, host)
		if err != nil {
			return err
		}
		fw := obs.Forwards
		if fw == nil {
			fw = []api.PortForward{}
		}
		if _, err := tx.Exec(ctx, `UPDATE instances SET observed_reboot_generation = greatest(observed_reboot_generation, $2),
			vf_pci_address = $3, port_forwards = $4, public_host = $5,
			console_log = CASE WHEN $6 = '' THEN console_log ELSE $6 END,
			console_log_at = CASE WHEN $6 = '' THEN console_log_at ELSE now() END,
			private_address = CASE WHEN $7 = '' THEN private_address ELSE $7 END WHERE id = $1`,
			id, obs.RebootGeneration, obs.VFPCIAddress, fw, obs.PublicHost, obs.ConsoleLogTail, obs.PrivateAddress); err != nil {
			return fmt.Errorf("record observation: %w", err)
		}
		inst.Ports, inst.publicHost = fw, obs.PublicHost
		if obs.PrivateAddress != "" {
			inst.PrivateAddress = obs.PrivateAddress
		}
		inst.SSH = sshEndpoint(inst.publicHost, inst.Ports)
		out = inst
		if inst.State == obs.State || (inst.State == StateDeleted && obs.State == api.ObservedDeleted) {
			return nil
		}
		// A VM moving between hosts is stopped on its source for the move: that is not the
		// tenant's stop, and neither its state nor billing's allocations change (hostmoves.go).
		if inst.DesiredState != StateDeleted {
			moving, err := hasOpenHostMove(ctx, tx, inst.ID)
			if err != nil || moving {
				return err
			}
		}
		allowed := false
		for _, from := range observedFrom[obs.State] {
			allowed = allowed || from == inst.State
		}
		if !allowed {
			if inst.State == StateStopping || inst.State == StateDeleting {
				return nil // stale report from before the stop or delete; see observedFrom
			}
			return &StateError{State: inst.State, Action: "report " + obs.State + " for"}
		}
		neverRan := inst.State == StatePending || inst.State == StateProvisioning
		reason := ""
		if obs.State == api.ObservedFailed {
			reason = obs.Reason
			if reason == "" {
				reason = "host reported failure without a reason"
			}
		}
		if err := setState(ctx, tx, s.clock, &inst, obs.State, "", reason, "host:"+host.String()); err != nil {
			return err
		}
		switch {
		case obs.State == api.ObservedDeleted && !inst.Released:
			if err := release(ctx, tx, &inst); err != nil {
				return err
			}
		case obs.State == api.ObservedFailed && neverRan:
			// A VM that never ran holds nothing the tenant can use: it gives back its GPU, host
			// room and quota now rather than at its deletion, so the next create is not refused.
			if err := release(ctx, tx, &inst); err != nil {
				return err
			}
		}
		out = inst
		return Audit(ctx, tx, inst.TenantID, "observe-"+obs.State, "instance", id.String(), map[string]string{"reason": reason})
	})
	return out, err
}

// release returns an instance's host room, GPU reservations and quota, and marks it released (its
// host no longer keeps it; its VF, if any, is freed when hostd tears the domain down).
func release(ctx context.Context, tx pgx.Tx, inst *Instance) error {
	if _, err := tx.Exec(ctx, `UPDATE instances SET released_at = now(), vf_pci_address = '' WHERE id = $1`, inst.ID); err != nil {
		return fmt.Errorf("mark released: %w", err)
	}
	inst.Released, inst.VFPCIAddress = true, ""
	if _, err := tx.Exec(ctx, `UPDATE gpus SET reserved_bytes = gpus.reserved_bytes - r.bytes FROM gpu_reservations r
		WHERE r.instance_id = $1 AND gpus.id = r.gpu_id`, inst.ID); err != nil {
		return fmt.Errorf("release GPUs: %w", err)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM gpu_reservations WHERE instance_id = $1`, inst.ID); err != nil {
		return fmt.Errorf("release GPUs: %w", err)
	}
	if _, err := tx.Exec(ctx, `UPDATE hosts SET used_vcpus = used_vcpus - $2, used_memory_mib = used_memory_mib - $3,
		used_disk_gib = used_disk_gib - $4 WHERE id = $1`, inst.HostID, inst.VCPUs, inst.MemoryMiB, inst.DiskGiB); err != nil {
		return fmt.Errorf("release host: %w", err)
	}
	if _, err := tx.Exec(ctx, `UPDATE tenants SET used_instances = used_instances - 1, used_gpus = used_gpus - $2,
		used_gpu_memory_bytes = used_gpu_memory_bytes - $3 WHERE id = $1`,
		inst.TenantID, inst.GPUCount, int64(inst.GPUCount)*inst.GPUMemoryBytes); err != nil {
		return fmt.Errorf("release quota: %w", err)
	}
	return nil
}

// Placed is an instance as its host needs it, with where its GPUs are.
type Placed struct {
	Instance
	PartitionKey int
	TypeName     string
	Endpoint     string
	GPUUUIDs     []string
	// ImageSource and ImageSHA256 say where hostd fetches the instance's image and what it must
	// hash to (the newest image of that name, deleted or not: an instance keeps its image).
	ImageSource, ImageSHA256 string
}

// HostInstances lists the instances placed on host that are not yet deleted and still hold
// their room there (a released failed instance does not), and those a host drain is moving onto
// host whose disks the source offers (hostmoves.go).
func (s *Store) HostInstances(ctx context.Context, host uuid.UUID) ([]Placed, error) {
	rows, err := s.Pool.Query(ctx, `SELECT `+prefixed("i.", instanceCols)+`, t.partition_key, coalesce(it.name, ''), coalesce(g.endpoint, ''),
		coalesce((SELECT array_agg(u.uuid ORDER BY u.idx) FROM gpu_reservations r JOIN gpus u ON u.id = r.gpu_id
		          WHERE r.instance_id = i.id), '{}'), coalesce(im.source, ''), coalesce(im.sha256, '')
		FROM instances i JOIN tenants t ON t.id = i.tenant_id LEFT JOIN instance_types it ON it.id = i.instance_type_id
		LEFT JOIN gpu_servers g ON g.id = i.gpu_server_id
		LEFT JOIN LATERAL (SELECT source, sha256 FROM images WHERE name = i.image
		                   ORDER BY deleted_at DESC NULLS FIRST, id DESC LIMIT 1) im ON true
		WHERE (i.host_id = $1 OR i.id IN (`+movingIn+`)) AND i.state <> 'deleted' AND i.released_at IS NULL ORDER BY i.id`, host)
	if err != nil {
		return nil, fmt.Errorf("host instances: %w", err)
	}
	defer rows.Close()
	var out []Placed
	for rows.Next() {
		var p Placed
		var err error
		if p.Instance, err = scanInstance(rows, &p.PartitionKey, &p.TypeName, &p.Endpoint, &p.GPUUUIDs,
			&p.ImageSource, &p.ImageSHA256); err != nil {
			return nil, fmt.Errorf("host instances: %w", err)
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// HostInstance is one entry of HostInstances.
func (s *Store) HostInstance(ctx context.Context, host, id uuid.UUID) (Placed, error) {
	all, err := s.HostInstances(ctx, host)
	if err != nil {
		return Placed{}, err
	}
	for _, p := range all {
		if p.ID == id {
			return p, nil
		}
	}
	return Placed{}, ErrNotFound
}

func prefixed(p, cols string) string {
	out := p
	for i := 0; i < len(cols); i++ {
		out += string(cols[i])
		if cols[i] == ',' {
			for i+1 < len(cols) && (cols[i+1] == ' ' || cols[i+1] == '\n' || cols[i+1] == '\t') {
				i++
				out += string(cols[i])
			}
			out += p
		}
	}
	return out
}
