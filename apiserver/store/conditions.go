package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Condition types of an instance: whether the daemons it depends on are heard from.
const (
	CondHostReachable      = "HostReachable"
	CondGPUServerReachable = "GPUServerReachable"
)

// ConditionTypes lists every instance condition type.
var ConditionTypes = []string{CondHostReachable, CondGPUServerReachable}

// Condition statuses, as in Kubernetes.
const (
	CondTrue  = "True"
	CondFalse = "False"
)

// Condition is one observation about an instance, Kubernetes style. Every live instance lists
// HostReachable, and GPUServerReachable when it has GPUs on a GPU server; Status is "True" when
// all is well. Since and Message are set only when Status is "False". Conditions are derived at
// read time from the host and GPU server rows: the instance's state is left alone, because a
// silent daemon does not prove the VM is gone.
//
// Messages never name a host or GPU server: tenants see them too.
type Condition struct {
	Type    string     `json:"type"`
	Status  string     `json:"status"`
	Since   *time.Time `json:"since,omitempty"`
	Message string     `json:"message,omitempty"`
}

// daemonReach is what conditions need of one host or GPU server.
type daemonReach struct {
	unreachable   bool
	markedAt      *time.Time // when the sweeper marked it unreachable (its audit record)
	lastHeartbeat *time.Time
}

// reachSQL reads the status of the given hosts ($1) and GPU servers ($2). The time a daemon was
// marked unreachable is its latest "unreachable" audit record, looked up only for unreachable
// ones; platform records have no tenant, so the audit_log_tenant index serves the lookup.
const reachSQL = `SELECT d.kind, d.id, d.status = 'unreachable', d.last_heartbeat_at,
		(SELECT a.at FROM audit_log a WHERE d.status = 'unreachable' AND a.tenant_id IS NULL
		   AND a.action = 'unreachable' AND a.resource_type = d.resource AND a.resource_id = d.id::text
		 ORDER BY a.id DESC LIMIT 1)
	FROM (SELECT 'host' AS kind, 'host' AS resource, id, status, last_heartbeat_at FROM hosts WHERE id = ANY($1)
	      UNION ALL
	      SELECT 'gpu', 'gpu-server', id, status, last_heartbeat_at FROM gpu_servers WHERE id = ANY($2)) d`

// withConditions fills the conditions of insts from their hosts and GPU servers.
func withConditions(ctx context.Context, q Execer, insts []Instance) error {
	var hosts, gpus []uuid.UUID
	for _, i := range insts {
		hosts = append(hosts, i.HostID)
		if i.GPUServerID != nil {
			gpus = append(gpus, *i.GPUServerID)
		}
	}
	host, gpu := map[uuid.UUID]daemonReach{}, map[uuid.UUID]daemonReach{}
	if len(insts) > 0 {
		rows, err := q.Query(ctx, reachSQL, hosts, gpus)
		if err != nil {
			return fmt.Errorf("instance conditions: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var kind string
			var id uuid.UUID
			var r daemonReach
			if err := rows.Scan(&kind, &id, &r.unreachable, &r.lastHeartbeat, &r.markedAt); err != nil {
				return fmt.Errorf("instance conditions: %w", err)
			}
			if kind == "host" {
				host[id] = r
			} else {
				gpu[id] = r
			}
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("instance conditions: %w", err)
		}
	}
	for n := range insts {
		insts[n].Conditions = conditions(insts[n], host, gpu)
	}
	return nil
}

// conditions derives an instance's conditions; deleted instances have none.
func conditions(i Instance, host, gpu map[uuid.UUID]daemonReach) []Condition {
	out := []Condition{} // never null in JSON
	if i.State == StateDeleted {
		return out
	}
	out = append(out, condition(CondHostReachable, "host", host[i.HostID]))
	if i.GPUServerID != nil {
		out = append(out, condition(CondGPUServerReachable, "GPU server", gpu[*i.GPUServerID]))
	}
	return out
}

func condition(typ, what string, r daemonReach) Condition {
	if !r.unreachable {
		return Condition{Type: typ, Status: CondTrue}
	}
	c := Condition{Type: typ, Status: CondFalse, Since: r.markedAt}
	if c.Since == nil { // the audit record was not written: the silence began no later than the last heartbeat
		c.Since = r.lastHeartbeat
	}
	c.Message = "the " + what + " of this instance stopped reporting"
	if r.lastHeartbeat != nil {
		c.Message += " (last heartbeat " + r.lastHeartbeat.UTC().Format(time.RFC3339) + ")"
	}
	c.Message += "; the instance may be unavailable. Its state is the last one observed."
	return c
}

// ConditionFilter matches instances whose condition Type has Status.
type ConditionFilter struct{ Type, Status string }

// ParseConditionFilter reads "Type=Status", e.g. "HostReachable=False".
func ParseConditionFilter(s string) (ConditionFilter, error) {
	typ, status, ok := strings.Cut(s, "=")
	if !ok {
		return ConditionFilter{}, fmt.Errorf("%q is not TYPE=STATUS", s)
	}
	if typ != CondHostReachable && typ != CondGPUServerReachable {
		return ConditionFilter{}, fmt.Errorf("%q is not a condition type (one of %s)", typ, strings.Join(ConditionTypes, ", "))
	}
	if status != CondTrue && status != CondFalse {
		return ConditionFilter{}, fmt.Errorf("%q is not a condition status (True or False)", status)
	}
	return ConditionFilter{typ, status}, nil
}

// sql is the filter as a condition on instances, matching what conditions derives.
func (f ConditionFilter) sql() string {
	table, col := "hosts", "host_id"
	if f.Type == CondGPUServerReachable {
		table, col = "gpu_servers", "gpu_server_id"
	}
	silent := `EXISTS (SELECT 1 FROM ` + table + ` d WHERE d.id = instances.` + col + ` AND d.status = 'unreachable')`
	if f.Status == CondTrue {
		silent = "NOT " + silent
	}
	return "state <> 'deleted' AND " + col + " IS NOT NULL AND " + silent
}
