package server

import (
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"gpucloud/api"
	"gpucloud/apiserver/store"
	"gpucloud/internal/sessiontoken"
)

// agentRoutes serve hostd and gpuserverd (see package api for the contract).
func (s *Server) agentRoutes(g *gin.RouterGroup) {
	g.POST("/host/heartbeat", s.handle(s.hostHeartbeat))
	g.GET("/host/instances", s.handle(s.hostInstances))
	g.PUT("/host/instances/:id/status", s.handle(s.hostReport))
	g.POST("/host/instances/:id/token", s.handle(s.renewToken))
	g.PUT("/host/moves/:id", s.handle(s.hostMoveReport)) // hostdrain.go
	g.POST("/gpu-server/heartbeat", s.handle(s.gpuServerHeartbeat))
	g.GET("/gpu-server/revocations", s.handle(s.gpuServerRevocations)) // revocations.go
}

func (s *Server) hostHeartbeat(c *gin.Context) error {
	var r api.HostReport
	if err := bind(c, &r); err != nil {
		return err
	}
	var f fields
	f.check(r.Hostname != "" && len(r.Hostname) <= 253, "hostname", "1-253 characters")
	f.check(r.Capacity.VCPUs >= 0, "capacity.vcpus", "must not be negative")
	f.check(r.Capacity.MemoryMiB >= 0, "capacity.memory_mib", "must not be negative")
	f.check(r.Capacity.DiskGiB >= 0, "capacity.disk_gib", "must not be negative")
	f.check(r.Capacity.InfiniBandVFs >= 0, "capacity.infiniband_vfs", "must not be negative")
	f.check(validConsoleURL(r.ConsoleURL), "console_url", "empty, or ws://host:port or wss://host:port (at most 512 characters)")
	if err := f.err(); err != nil {
		return err
	}
	id := principal(c).DaemonID
	cordoned, err := s.store.HostHeartbeat(c.Request.Context(), id, r)
	if err == store.ErrNotFound {
		return forbidden("this credential is not a host's")
	}
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, api.HostAck{HostID: id.String(), Cordoned: cordoned, HeartbeatPeriod: s.opts.HeartbeatPeriod,
		ConsoleKey: base64.StdEncoding.EncodeToString(s.opts.TokenKey.Public().(ed25519.PublicKey))})
	return nil
}

func (s *Server) hostInstances(c *gin.Context) error {
	list, err := s.store.HostInstances(c.Request.Context(), principal(c).DaemonID)
	if err != nil {
		return err
	}
	vols, err := s.store.HostVolumes(c.Request.Context(), principal(c).DaemonID)
	if err != nil {
		return err
	}
	out := api.DesiredInstances{Instances: make([]api.DesiredInstance, 0, len(list)), Volumes: make([]api.DesiredVolume, 0, len(vols))}
	attached := map[uuid.UUID][]api.VolumeAttachment{}
	for _, v := range vols {
		out.Volumes = append(out.Volumes, api.DesiredVolume{ID: v.ID.String(), SizeGiB: v.SizeGiB})
		if v.InstanceID != nil {
			attached[*v.InstanceID] = append(attached[*v.InstanceID], api.VolumeAttachment{ID: v.ID.String(), Device: v.Device})
		}
	}
	moves, err := s.store.HostMoveOrders(c.Request.Context(), principal(c).DaemonID)
	if err != nil {
		return err
	}
	now := time.Now()
	for _, p := range list {
		d, err := s.desired(p, now)
		if err != nil {
			return err
		}
		d.Spec.Volumes = attached[p.ID]
		if m, ok := moves[p.ID]; ok {
			d.Move = &m
		}
		out.Instances = append(out.Instances, d)
	}
	c.JSON(http.StatusOK, out)
	return nil
}

// desired turns a placed instance into what its host needs, with a fresh session token.
func (s *Server) desired(p store.Placed, now time.Time) (api.DesiredInstance, error) {
	d := api.DesiredInstance{
		ID: p.ID.String(), TenantID: p.TenantID.String(), Name: p.Name, InstanceType: p.TypeName, DesiredState: p.DesiredState,
		RebootGeneration: p.RebootGeneration, PartitionKey: uint16(p.PartitionKey),
		Spec: api.InstanceSpec{VCPUs: p.VCPUs, MemoryMiB: p.MemoryMiB, DiskGiB: p.DiskGiB, Image: p.Image,
			ImageSource: p.ImageSource, ImageSHA256: p.ImageSHA256, SSHKey: p.SSHKey,
			SSHKeys: p.SSHAuthorizedKeys, UserData: p.UserData, ForwardPorts: p.ForwardPorts},
	}
	if p.GPUServerID == nil || len(p.GPUUUIDs) == 0 {
		return d, nil
	}
	d.GPU = &api.GPUGrant{GPUServerID: p.GPUServerID.String(), GPUUUIDs: p.GPUUUIDs, Model: p.GPUModel,
		Tier: p.Tier, MemoryQuota: uint64(p.MemoryQuota)}
	if p.Endpoint != "" {
		d.GPU.Endpoints = []string{p.Endpoint}
	}
	tok, err := s.token(p, now)
	if err != nil {
		return d, err
	}
	d.Token = tok
	return d, nil
}

func (s *Server) token(p store.Placed, now time.Time) (api.SessionToken, error) {
	exp := now.Add(s.opts.TokenTTL)
	tok, err := sessiontoken.Sign(s.opts.TokenKey, sessiontoken.Claims{
		SessionID: p.ID.String(), TenantID: p.TenantID.String(), InstanceID: p.ID.String(),
		GPUServer: p.GPUServerID.String(), GPUs: p.GPUUUIDs, Tier: p.Tier, MemoryQuota: uint64(p.MemoryQuota),
		IssuedAt: now.Unix(), ExpiresAt: exp.Unix(),
	})
	if err != nil {
		return api.SessionToken{}, fmt.Errorf("sign session token for %s: %w", p.ID, err)
	}
	return api.SessionToken{Token: tok, ExpiresAt: time.Unix(exp.Unix(), 0).UTC()}, nil
}

func (s *Server) hostReport(c *gin.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	var obs api.InstanceObserved
	if err := bind(c, &obs); err != nil {
		return err
	}
	if err := checkObserved(obs); err != nil {
		return err
	}
	if _, err := s.store.Observe(c.Request.Context(), principal(c).DaemonID, id, obs); err != nil {
		return err
	}
	c.Status(http.StatusNoContent)
	return nil
}

// checkObserved validates what a host says it observed of an instance.
func checkObserved(obs api.InstanceObserved) error {
	var f fields
	f.check(store.ValidObserved(obs.State), "state", "must be provisioning, running, stopped, deleted or failed")
	f.check(obs.RebootGeneration >= 0, "reboot_generation", "must not be negative")
	f.check(len(obs.Reason) <= 1024, "reason", "at most 1024 characters")
	f.check(obs.PrivateAddress == "" || validPrivateAddress(obs.PrivateAddress), "private_address", "must be an IPv4 address of a tenant network (10.128.0.0/9)")
	f.check(len(obs.VFPCIAddress) <= 32, "vf_pci_address", "at most 32 characters")
	f.check(len(obs.ConsoleLogTail) <= 16384, "console_log_tail", "at most 16384 bytes")
	f.check(len(obs.PublicHost) <= 253 && !strings.ContainsAny(obs.PublicHost, " @/\t\n"), "public_host", "a host name or address, at most 253 characters")
	f.check(len(obs.Forwards) <= 1+maxForwardPorts, "forwards", "at most 5")
	for i, fw := range obs.Forwards {
		f.check(fw.GuestPort >= 1 && fw.GuestPort <= 65535 && fw.HostPort >= 1 && fw.HostPort <= 65535,
			fmt.Sprintf("forwards[%d]", i), "ports must be 1-65535")
	}
	return f.err()
}

func (s *Server) renewToken(c *gin.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	p, err := s.store.HostInstance(c.Request.Context(), principal(c).DaemonID, id)
	if err != nil {
		return err
	}
	if p.GPUServerID == nil || len(p.GPUUUIDs) == 0 {
		return problemf(http.StatusConflict, "no-gpu", "No GPU", "instance %s has no GPU, so no session token", id)
	}
	tok, err := s.token(p, time.Now())
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, tok)
	return nil
}

func (s *Server) gpuServerHeartbeat(c *gin.Context) error {
	var r api.GPUServerReport
	if err := bind(c, &r); err != nil {
		return err
	}
	var f fields
	f.check(r.Hostname != "" && len(r.Hostname) <= 253, "hostname", "1-253 characters")
	f.check(validEndpoint(r.Endpoint), "endpoint", "must be host:port")
	f.check(len(r.GPUs) <= 64, "gpus", "at most 64 GPUs")
	f.check(len(r.ActiveSessions) <= 100000, "active_sessions", "at most 100000")
	seen := map[string]bool{}
	for i, g := range r.GPUs {
		f.check(g.UUID != "" && len(g.UUID) <= 128 && !seen[g.UUID], fmt.Sprintf("gpus[%d].uuid", i), "required, unique, at most 128 characters")
		f.check(g.Name != "", fmt.Sprintf("gpus[%d].name", i), "required")
		f.check(g.MemoryBytes > 0 && g.MemoryBytes < 1<<62, fmt.Sprintf("gpus[%d].memory_bytes", i), "must be positive")
		seen[g.UUID] = true
	}
	checkMoveReports(&f, r.Moves)
	if err := f.err(); err != nil {
		return err
	}
	id := principal(c).DaemonID
	cordoned, err := s.store.GPUServerHeartbeat(c.Request.Context(), id, r)
	if err == store.ErrNotFound {
		return forbidden("this credential is not a GPU server's")
	}
	if err != nil {
		return err
	}
	end, err := s.store.StaleSessions(c.Request.Context(), id, r.ActiveSessions)
	if err != nil {
		return err
	}
	moves, err := s.gpuServerMoves(c, id, r.Moves) // drain.go
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, api.GPUServerAck{GPUServerID: id.String(), Cordoned: cordoned, HeartbeatPeriod: s.opts.HeartbeatPeriod,
		TokenPublicKey: base64.StdEncoding.EncodeToString([]byte(s.opts.TokenKey.Public().(ed25519.PublicKey))), EndSessions: end,
		Moves: moves})
	return nil
}

func validEndpoint(ep string) bool {
	i := strings.LastIndexByte(ep, ':')
	return i > 0 && i < len(ep)-1 && len(ep) <= 255
}

// tenantNetworks is where hosts number tenant networks (hostd/virt.TenantNetwork).
var tenantNetworks = netip.MustParsePrefix("10.128.0.0/9")

func validPrivateAddress(s string) bool {
	a, err := netip.ParseAddr(s)
	return err == nil && a.Is4() && tenantNetworks.Contains(a)
}
