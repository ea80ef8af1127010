package store

import (
	"context"
	"fmt"
	"slices"

	"github.com/google/uuid"

	"gpucloud/api"
	"gpucloud/internal/authn"
)

// usagePlacement is what the control plane knows of an instance that usage is billed against.
type usagePlacement struct {
	tenant      uuid.UUID
	host        uuid.UUID
	gpuServer   *uuid.UUID
	typeName    string
	vcpus       int
	memoryMiB   int
	tier        string
	gpuCount    int
	memoryQuota uint64
	gpuModel    string   // the instance's GPU model (gpu_models.name)
	gpuNames    []string // NVML names of the GPU server's GPUs of that model
	// movedVia are the GPU servers a drain moved (or is moving) the instance between: each bills
	// its own part of a moved session (the source up to the hand-off, the target from it).
	movedVia []uuid.UUID
}

// AuthorizeUsage checks usage records against the control plane's own rows: a daemon may bill
// only instances placed on it, for their tenant, with their type, size, tier and GPU count. It
// returns one reason per record ("" for allowed), each starting with the field that is wrong.
// Records are checked as the daemon sent them (billing validates their shape); a compromised
// daemon must not be able to bill another tenant, another daemon's instance, or a bigger one.
func (s *Store) AuthorizeUsage(ctx context.Context, daemon authn.Principal, recs []api.UsageRecord) ([]string, error) {
	reasons := make([]string, len(recs))
	ids := make([]uuid.UUID, 0, len(recs))
	for i, r := range recs {
		id, err := uuid.Parse(r.InstanceID)
		if err != nil {
			reasons[i] = fmt.Sprintf("instance_id: %q is not an instance id", r.InstanceID)
			continue
		}
		ids = append(ids, id)
	}
	placed, err := s.usagePlacements(ctx, ids)
	if err != nil {
		return nil, err
	}
	for i, r := range recs {
		if reasons[i] != "" {
			continue
		}
		p, ok := placed[uuid.MustParse(r.InstanceID)]
		if !ok {
			reasons[i] = fmt.Sprintf("instance_id: no instance %s", r.InstanceID)
			continue
		}
		reasons[i] = p.check(daemon, r)
	}
	return reasons, nil
}

func (p usagePlacement) check(daemon authn.Principal, r api.UsageRecord) string {
	switch {
	case daemon.Daemon == authn.DaemonHost && p.host != daemon.DaemonID:
		return fmt.Sprintf("instance_id: instance %s is not placed on host %s", r.InstanceID, daemon.DaemonID)
	case daemon.Daemon == authn.DaemonGPUServer && (p.gpuServer == nil || *p.gpuServer != daemon.DaemonID) &&
		!slices.Contains(p.movedVia, daemon.DaemonID):
		return fmt.Sprintf("instance_id: instance %s is not placed on GPU server %s", r.InstanceID, daemon.DaemonID)
	case daemon.Daemon != authn.DaemonHost && daemon.Daemon != authn.DaemonGPUServer:
		return "source: the credential is neither a host's nor a GPU server's"
	case !sameUUID(r.TenantID, p.tenant):
		return fmt.Sprintf("tenant_id: instance %s belongs to another tenant", r.InstanceID)
	}
	switch r.Kind {
	case api.UsageVM:
		switch {
		case r.InstanceType != p.typeName:
			return fmt.Sprintf("instance_type: instance %s is of type %q", r.InstanceID, p.typeName)
		case r.VCPUs != p.vcpus:
			return fmt.Sprintf("vcpus: instance %s has %d", r.InstanceID, p.vcpus)
		case r.MemoryMiB != p.memoryMiB:
			return fmt.Sprintf("memory_mib: instance %s has %d", r.InstanceID, p.memoryMiB)
		}
	case api.UsageGPU:
		switch {
		case p.gpuCount == 0:
			return fmt.Sprintf("instance_id: instance %s has no GPU", r.InstanceID)
		case r.Tier != p.tier:
			return fmt.Sprintf("tier: instance %s is %s", r.InstanceID, p.tier)
		case r.GPUCount != p.gpuCount:
			return fmt.Sprintf("gpu_count: instance %s has %d", r.InstanceID, p.gpuCount)
		case r.MemoryQuota != p.memoryQuota:
			return fmt.Sprintf("memory_quota: instance %s has %d bytes per GPU", r.InstanceID, p.memoryQuota)
		case r.GPUModel != p.gpuModel && !slices.Contains(p.gpuNames, r.GPUModel):
			// gpuserverd names the GPU as NVML does; the model's own name is accepted too.
			return fmt.Sprintf("gpu_model: %q is neither the instance's model %q nor a GPU of it on this GPU server", r.GPUModel, p.gpuModel)
		}
	}
	return ""
}

func sameUUID(s string, id uuid.UUID) bool {
	u, err := uuid.Parse(s)
	return err == nil && u == id
}

// usagePlacements reads the instances ids name. Placement is never undone (host_id and
// gpu_server_id stay after a delete), so usage sent after an instance ended still checks.
func (s *Store) usagePlacements(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID]usagePlacement, error) {
	out := make(map[uuid.UUID]usagePlacement, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := s.Pool.Query(ctx, `
		SELECT i.id, i.tenant_id, i.host_id, i.gpu_server_id, t.name, i.vcpus, i.memory_mib, i.tier,
			i.gpu_count, i.memory_quota, i.gpu_model,
			COALESCE((SELECT array_agg(DISTINCT g.name) FROM gpus g JOIN gpu_models m ON m.id = g.gpu_model_id
				WHERE (g.gpu_server_id = i.gpu_server_id OR g.gpu_server_id IN (SELECT target_id FROM gpu_server_moves v
					WHERE v.instance_id = i.id AND v.state <> 'unplaced')) AND m.name = i.gpu_model), '{}'),
			COALESCE((SELECT array_agg(x) FROM gpu_server_moves v, unnest(ARRAY[v.source_id, v.target_id]) x
				WHERE v.instance_id = i.id AND v.state <> 'unplaced'), '{}')
		FROM instances i JOIN instance_types t ON t.id = i.instance_type_id
		WHERE i.id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("usage placements: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id uuid.UUID
		var p usagePlacement
		var quota int64
		if err := rows.Scan(&id, &p.tenant, &p.host, &p.gpuServer, &p.typeName, &p.vcpus, &p.memoryMiB, &p.tier,
			&p.gpuCount, &quota, &p.gpuModel, &p.gpuNames, &p.movedVia); err != nil {
			return nil, fmt.Errorf("usage placements: %w", err)
		}
		p.memoryQuota = uint64(quota)
		out[id] = p
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("usage placements: %w", err)
	}
	return out, nil
}
