package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"gpucloud/api"
)

// Instance states.
const (
	StatePending      = "pending"
	StateProvisioning = "provisioning"
	StateRunning      = "running"
	StateStopping     = "stopping"
	StateStopped      = "stopped"
	StateDeleting     = "deleting"
	StateDeleted      = "deleted"
	StateFailed       = "failed"
)

// Instance is a tenant's VM.
type Instance struct {
	ID               uuid.UUID  `json:"id"`
	TenantID         uuid.UUID  `json:"tenant_id"`
	Name             string     `json:"name"`
	InstanceTypeID   uuid.UUID  `json:"instance_type_id"`
	Image            string     `json:"image"`
	SSHKey           string     `json:"ssh_key,omitempty"`
	State            string     `json:"state"`
	DesiredState     string     `json:"desired_state"`
	FailureReason    string     `json:"failure_reason,omitempty"`
	HostID           uuid.UUID  `json:"host_id"`
	GPUServerID      *uuid.UUID `json:"gpu_server_id,omitempty"`
	VCPUs            int        `json:"vcpus"`
	MemoryMiB        int        `json:"memory_mib"`
	DiskGiB          int        `json:"disk_gib"`
	Tier             string     `json:"tier"`
	GPUModel         string     `json:"gpu_model,omitempty"`
	GPUCount         int        `json:"gpu_count"`
	GPUMemoryBytes   int64      `json:"gpu_memory_bytes"`
	MemoryQuota      int64      `json:"-"`
	RebootGeneration int64      `json:"reboot_generation"`
	ObservedReboot   int64      `json:"-"`
	VFPCIAddress     string     `json:"vf_pci_address,omitempty"`
	// SSHAuthorizedKeys and UserData go into the VM's seed; they are not shown back.
	SSHAuthorizedKeys []string `json:"-"`
	UserData          string   `json:"-"`
	// ForwardPorts are the extra guest ports the tenant asked to reach (besides SSH's 22).
	ForwardPorts []int `json:"forward_ports,omitempty"`
	// SSH is how to log in, once the host forwarded a port to the guest's 22.
	SSH *SSHEndpoint `json:"ssh,omitempty"`
	// Ports are every forwarded port (22 first), reachable at SSH.Host.
	Ports      []api.PortForward `json:"ports,omitempty"`
	publicHost string
	// PrivateAddress is the instance's address on its tenant's network (reachable from the
	// tenant's other instances on the host, from nothing else).
	PrivateAddress string `json:"private_address,omitempty"`
	// Released: the instance gave back its GPU, host room and quota (it failed before it ran).
	Released  bool      `json:"released,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// Conditions are derived from the instance's host and GPU server at read time.
	Conditions []Condition `json:"conditions"`
}

const instanceCols = `id, tenant_id, name, instance_type_id, image, ssh_key, state, desired_state, failure_reason,
	host_id, gpu_server_id, vcpus, memory_mib, disk_gib, tier, gpu_model, gpu_count, gpu_memory_bytes, memory_quota,
	reboot_generation, observed_reboot_generation, vf_pci_address, released_at IS NOT NULL,
	ssh_authorized_keys, user_data, forward_ports, public_host, port_forwards, private_address, created_at, updated_at`

// scanInstance reads instanceCols, then any extra columns into extra.
func scanInstance(row pgx.Row, extra ...any) (Instance, error) {
	var i Instance
	dest := append([]any{&i.ID, &i.TenantID, &i.Name, &i.InstanceTypeID, &i.Image, &i.SSHKey, &i.State, &i.DesiredState,
		&i.FailureReason, &i.HostID, &i.GPUServerID, &i.VCPUs, &i.MemoryMiB, &i.DiskGiB, &i.Tier, &i.GPUModel,
		&i.GPUCount, &i.GPUMemoryBytes, &i.MemoryQuota, &i.RebootGeneration, &i.ObservedReboot, &i.VFPCIAddress,
		&i.Released, &i.SSHAuthorizedKeys, &i.UserData, &i.ForwardPorts, &i.publicHost, &i.Ports, &i.PrivateAddress, &i.CreatedAt, &i.UpdatedAt}, extra...)
	err := row.Scan(dest...)
	i.SSH = sshEndpoint(i.publicHost, i.Ports)
	return i, err
}

// SSHEndpoint is where a tenant logs in to an instance: root with one of its keys.
type SSHEndpoint struct {
	Host    string `json:"host"`
	Port    int    `json:"port"`
	User    string `json:"user"`
	Command string `json:"command"`
}

// sshUser is the account the seed gives the instance's keys (cloud-init, disable_root: false).
const sshUser = "root"

func sshEndpoint(host string, ports []api.PortForward) *SSHEndpoint {
	for _, p := range ports {
		if p.GuestPort == 22 && host != "" {
			return &SSHEndpoint{Host: host, Port: p.HostPort, User: sshUser,
				Command: fmt.Sprintf("ssh -p %d %s@%s", p.HostPort, sshUser, host)}
		}
	}
	return nil
}

// NewInstance is a create request, already validated for shape.
type NewInstance struct {
	Name           string
	InstanceTypeID uuid.UUID
	Image          string
	SSHKey         string
	// AuthorizedKeys: every key the VM accepts (those named by id, then the inline one).
	AuthorizedKeys []string
	UserData       string
	ForwardPorts   []int
}

// QuotaError names the quota a create would exceed.
type QuotaError struct {
	Resource         string
	Limit, Used, Ask int64
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("%s quota exceeded: limit %d, in use %d, requested %d", e.Resource, e.Limit, e.Used, e.Ask)
}

// FieldError is a request naming something that does not exist or does not fit.
type FieldError struct{ Field, Reason string }

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

const chargeSQL = `UPDATE tenants SET used_instances = used_instances + 1, used_gpus = used_gpus + $2,
	used_gpu_memory_bytes = used_gpu_memory_bytes + $3
	WHERE id = $1 AND used_instances + 1 <= quota_instances AND used_gpus + $2 <= quota_gpus
	  AND used_gpu_memory_bytes + $3 <= quota_gpu_memory_bytes`

// quotaError says which quota a refused charge would have exceeded.
func quotaError(ctx context.Context, tx Execer, tenant uuid.UUID, gpus, gpuMem int64) error {
	var t Tenant
	if err := tx.QueryRow(ctx, `SELECT quota_instances, quota_gpus, quota_gpu_memory_bytes, used_instances, used_gpus,
		used_gpu_memory_bytes FROM tenants WHERE id = $1`, tenant).Scan(&t.QuotaInstances, &t.QuotaGPUs,
		&t.QuotaGPUMemoryBytes, &t.UsedInstances, &t.UsedGPUs, &t.UsedGPUMemoryBytes); err != nil {
		return fmt.Errorf("read quota: %w", err)
	}
	switch {
	case t.UsedInstances+1 > t.QuotaInstances:
		return &QuotaError{"instances", int64(t.QuotaInstances), int64(t.UsedInstances), 1}
	case int64(t.UsedGPUs)+gpus > int64(t.QuotaGPUs):
		return &QuotaError{"gpus", int64(t.QuotaGPUs), int64(t.UsedGPUs), gpus}
	default:
		return &QuotaError{"gpu_memory_bytes", t.QuotaGPUMemoryBytes, t.UsedGPUMemoryBytes, gpuMem}
	}
}

const eventSQL = `INSERT INTO instance_events (instance_id, from_state, to_state, reason, actor) VALUES ($1, $2, $3, $4, $5)`

func recordEvent(ctx context.Context, q Execer, id uuid.UUID, from, to, reason, actor string) error {
	if _, err := q.Exec(ctx, eventSQL, id, from, to, reason, actor); err != nil {
		return fmt.Errorf("record event %s->%s: %w", from, to, err)
	}
	return nil
}

// GetInstance returns an instance of tenant (zero: any tenant). Another tenant's instance is
// ErrNotFound, indistinguishable from one that does not exist.
func (s *Store) GetInstance(ctx context.Context, tenant, id uuid.UUID) (Instance, error) {
	i, err := scanInstance(s.Pool.QueryRow(ctx, `SELECT `+instanceCols+` FROM instances
		WHERE id = $1 AND ($2::uuid IS NULL OR tenant_id = $2)`, id, nullable(tenant)))
	if errors.Is(err, pgx.ErrNoRows) {
		return i, ErrNotFound
	}
	if err != nil {
		return i, fmt.Errorf("get instance: %w", err)
	}
	one := []Instance{i}
	if err := withConditions(ctx, s.Pool, one); err != nil {
		return i, err
	}
	return one[0], nil
}

// InstanceFilter narrows an instance list. The zero value lists live instances: deleted ones
// only with IncludeDeleted or when States names "deleted".
type InstanceFilter struct {
	States         []string  // any of these states; empty: any
	HostID         uuid.UUID // zero: any host
	GPUServerID    uuid.UUID // zero: any GPU server
	IncludeDeleted bool
	Conditions     []ConditionFilter // all of these hold; each excludes deleted instances
}

// ListInstances pages a tenant's instances (zero: all tenants) by id. The conditions are
// written out rather than "($n IS NULL OR ...)", so that each list gets the plan of its filters
// (instances_host and instances_gpu_server for the drain polls of operators).
func (s *Store) ListInstances(ctx context.Context, tenant uuid.UUID, f InstanceFilter, after uuid.UUID, limit int) ([]Instance, error) {
	where, args := "id > $1", []any{after}
	and := func(cond string, arg any) {
		args = append(args, arg)
		where += " AND " + strings.ReplaceAll(cond, "$?", "$"+strconv.Itoa(len(args)))
	}
	if tenant != uuid.Nil {
		and("tenant_id = $?", tenant)
	}
	if len(f.States) > 0 {
		and("state = ANY($?)", f.States)
	}
	if !f.IncludeDeleted && !slices.Contains(f.States, StateDeleted) {
		where += " AND state <> 'deleted'"
	}
	if f.HostID != uuid.Nil {
		and("host_id = $?", f.HostID)
	}
	if f.GPUServerID != uuid.Nil {
		and("gpu_server_id = $?", f.GPUServerID)
	}
	for _, c := range f.Conditions {
		where += " AND " + c.sql()
	}
	args = append(args, limit)
	rows, err := s.Pool.Query(ctx, `SELECT `+instanceCols+` FROM instances WHERE `+where+
		` ORDER BY id LIMIT $`+strconv.Itoa(len(args)), args...)
	if err != nil {
		return nil, fmt.Errorf("list instances: %w", err)
	}
	defer rows.Close()
	var out []Instance
	for rows.Next() {
		i, err := scanInstance(rows)
		if err != nil {
			return nil, fmt.Errorf("list instances: %w", err)
		}
		out = append(out, i)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list instances: %w", err)
	}
	rows.Close()
	if err := withConditions(ctx, s.Pool, out); err != nil {
		return nil, err
	}
	return out, nil
}

// States lists every instance state.
var States = []string{StatePending, StateProvisioning, StateRunning, StateStopping, StateStopped, StateDeleting,
	StateDeleted, StateFailed}

// Event is one recorded state transition.
type Event struct {
	From   string    `json:"from"`
	To     string    `json:"to"`
	Reason string    `json:"reason,omitempty"`
	Actor  string    `json:"actor"`
	At     time.Time `json:"at"`
}

// ListEvents returns an instance's transitions, oldest first.
func (s *Store) ListEvents(ctx context.Context, id uuid.UUID) ([]Event, error) {
	rows, err := s.Pool.Query(ctx, `SELECT from_state, to_state, reason, actor, at FROM instance_events WHERE instance_id = $1 ORDER BY id`, id)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		var e Event
		if err := rows.Scan(&e.From, &e.To, &e.Reason, &e.Actor, &e.At); err != nil {
			return nil, fmt.Errorf("list events: %w", err)
		}
		out = append(out, e)
	}
	return out, rows.Err()
}
