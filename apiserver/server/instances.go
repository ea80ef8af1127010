package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"gpucloud/apiserver/placement"
	"gpucloud/apiserver/store"
	"gpucloud/internal/authn"
	"gpucloud/internal/validate"
)

// CreateInstanceRequest asks for a VM of an instance type.
type CreateInstanceRequest struct {
	Name           string    `json:"name" required:"true" doc:"1-63 characters: lower-case letters, digits and '-'"`
	InstanceTypeID uuid.UUID `json:"instance_type_id" required:"true" doc:"an instance type's id (GET /v1/instance-types)"`
	Image          string    `json:"image" required:"true" doc:"a registered image's name (GET /v1/images)"`
	// SSHKey is one OpenSSH public key line the VM accepts (besides SSHKeyIDs).
	SSHKey string `json:"ssh_key,omitempty"`
	// SSHKeyIDs name keys of the caller's (/v1/ssh-keys) the VM accepts; at most 10.
	SSHKeyIDs []uuid.UUID `json:"ssh_key_ids,omitempty" doc:"ids of the caller's SSH keys (GET /v1/ssh-keys), at most 10"`
	// UserData is cloud-init user-data run at first boot: "#cloud-config" YAML or a "#!"
	// script, at most 16384 bytes.
	UserData string `json:"user_data,omitempty" doc:"cloud-init user-data: #cloud-config YAML or a #! script, at most 16384 bytes"`
	// ForwardPorts are up to 4 guest TCP ports (besides SSH's 22) to reach from outside; the
	// instance's ports list shows the host ports they got.
	ForwardPorts []int `json:"forward_ports,omitempty" doc:"guest TCP ports to forward besides 22, at most 4"`
}

// maxForwardPorts limits the extra guest ports a VM may have forwarded.
const maxForwardPorts = 4

// validForwardPorts: at most 4 distinct guest ports in 1-65535, not 22 (always forwarded).
func validForwardPorts(ports []int) bool {
	if len(ports) > maxForwardPorts {
		return false
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p < 1 || p > 65535 || p == 22 || seen[p] {
			return false
		}
		seen[p] = true
	}
	return true
}

const createInstancePath = "/v1/instances"

func (s *Server) instanceRoutes(v1 *gin.RouterGroup) {
	v1.POST("/instances", s.handle(s.createInstance))
	v1.GET("/instances", s.handle(s.listInstances))
	v1.GET("/instances/:id", s.handle(func(c *gin.Context) error {
		inst, err := s.visibleInstance(c)
		if err != nil {
			return err
		}
		c.JSON(http.StatusOK, inst)
		return nil
	}))
	v1.GET("/instances/:id/events", s.handle(func(c *gin.Context) error {
		inst, err := s.visibleInstance(c)
		if err != nil {
			return err
		}
		evs, err := s.store.ListEvents(c.Request.Context(), inst.ID)
		if err != nil {
			return err
		}
		c.JSON(http.StatusOK, Page[store.Event]{Items: evs})
		return nil
	}))
	v1.GET("/instances/:id/console", s.handle(func(c *gin.Context) error {
		scope, id, err := scopedInstanceID(c)
		if err != nil {
			return err
		}
		log, err := s.store.ReadConsole(c.Request.Context(), scope, id)
		if err != nil {
			return err
		}
		c.JSON(http.StatusOK, log)
		return nil
	}))
	for _, action := range []string{"start", "stop", "reboot"} {
		v1.POST("/instances/:id/"+action, s.handle(s.act(action, http.StatusOK)))
	}
	v1.DELETE("/instances/:id", s.handle(s.act("delete", http.StatusAccepted)))
}

// instanceScope is the tenant whose instances the caller sees: its own, or all for platform roles.
func instanceScope(c *gin.Context) (uuid.UUID, error) {
	p := principal(c)
	switch p.Role {
	case authn.RoleTenantAdmin, authn.RoleTenantMember:
		return p.TenantID, nil
	case authn.RoleOperator, authn.RoleFinance:
		return uuid.Nil, nil
	}
	return uuid.Nil, forbidden("daemons use the agent API")
}

// scopedInstanceID is the caller's instance scope and the instance id of the path.
func scopedInstanceID(c *gin.Context) (scope, id uuid.UUID, err error) {
	if scope, err = instanceScope(c); err != nil {
		return scope, id, err
	}
	id, err = pathID(c, "id")
	return scope, id, err
}

func (s *Server) visibleInstance(c *gin.Context) (store.Instance, error) {
	scope, id, err := scopedInstanceID(c)
	if err != nil {
		return store.Instance{}, err
	}
	return s.store.GetInstance(c.Request.Context(), scope, id)
}

func (s *Server) createInstance(c *gin.Context) error {
	if err := require(c, authn.RoleTenantAdmin, authn.RoleTenantMember); err != nil {
		return err
	}
	var req CreateInstanceRequest
	if err := bind(c, &req); err != nil {
		return err
	}
	var f fields
	f.check(validName(req.Name), "name", validate.NameRule)
	f.check(req.InstanceTypeID != uuid.Nil, "instance_type_id", "required")
	f.check(validate.Image(req.Image) == nil, "image", validate.ImageRule)
	keyShape := len(req.SSHKey) <= 16384 && (req.SSHKey == "" || strings.HasPrefix(req.SSHKey, "ssh-") || strings.HasPrefix(req.SSHKey, "ecdsa-"))
	f.check(keyShape, "ssh_key", "must be an OpenSSH public key")
	inlineKey, _, keyOK := parseSSHKey(req.SSHKey)
	f.check(!keyShape || req.SSHKey == "" || keyOK, "ssh_key", "must be one OpenSSH public key line, without options")
	f.check(len(req.SSHKeyIDs) <= maxSSHKeyIDs, "ssh_key_ids", "at most 10 keys")
	f.check(validForwardPorts(req.ForwardPorts), "forward_ports", "at most 4 distinct guest ports in 1-65535, not 22 (SSH is always forwarded)")
	if req.UserData != "" {
		why, ok := validUserData(req.UserData)
		f.check(ok, "user_data", why)
	}
	if err := f.err(); err != nil {
		return err
	}
	p := principal(c)
	if s.opts.AdmitCreate != nil {
		if d := s.opts.AdmitCreate(c.Request.Context(), p.TenantID); d != nil {
			return d
		}
	}
	keys, err := s.store.ResolveSSHKeys(c.Request.Context(), p.UserID, req.SSHKeyIDs)
	if err != nil {
		return err
	}
	if inlineKey != "" {
		keys = append(keys, inlineKey)
	}
	var idem *store.Idempotency
	claim, claimed := c.Get(idemKey)
	if claimed {
		cl := claim.(idemClaim)
		idem = &store.Idempotency{Principal: cl.owner, Key: cl.key, Hash: cl.sum, Status: http.StatusCreated,
			ContentType: jsonContentType, Render: func(i store.Instance) ([]byte, error) { return json.Marshal(i) }}
	}
	inst, answer, err := s.store.CreateInstance(c.Request.Context(), p.TenantID, "user:"+p.UserID.String(), store.NewInstance{
		Name: req.Name, InstanceTypeID: req.InstanceTypeID, Image: req.Image, SSHKey: req.SSHKey,
		AuthorizedKeys: keys, UserData: req.UserData, ForwardPorts: req.ForwardPorts}, idem)
	if errors.Is(err, store.ErrIdempotencyRace) {
		cl := claim.(idemClaim)
		s.replay(c, cl.owner, cl.key, cl.sum)
		return nil
	}
	if err != nil {
		var reason string
		var quota *store.QuotaError
		switch {
		case placement.IsNoCapacity(err):
			reason = "no-capacity"
		case errors.As(err, &quota):
			reason = "quota"
		}
		if reason != "" {
			s.metrics.refusals.WithLabelValues(reason).Inc()
		}
		return err
	}
	s.metrics.placed.Inc()
	c.Header("Location", "/v1/instances/"+inst.ID.String())
	if answer != nil {
		c.Data(http.StatusCreated, jsonContentType, answer) // byte for byte what a replay returns
		return nil
	}
	c.JSON(http.StatusCreated, inst)
	return nil
}

func (s *Server) listInstances(c *gin.Context) error {
	scope, err := instanceScope(c)
	if err != nil {
		return err
	}
	after, limit, err := pageArgs(c)
	if err != nil {
		return err
	}
	f, err := instanceFilter(c)
	if err != nil {
		return err
	}
	list, err := s.store.ListInstances(c.Request.Context(), scope, f, after, limit)
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, page(list, limit, func(i store.Instance) uuid.UUID { return i.ID }))
	return nil
}

// instanceFilter reads the list's filters: ?state= (repeated or comma-separated), ?host_id=,
// ?gpu_server_id=, ?include_deleted= and ?condition=TYPE=STATUS (repeated or comma-separated; all
// must hold).
func instanceFilter(c *gin.Context) (store.InstanceFilter, error) {
	var f store.InstanceFilter
	for _, v := range c.QueryArray("state") {
		for _, st := range strings.Split(v, ",") {
			if !slices.Contains(store.States, st) {
				return f, invalid("state", fmt.Sprintf("%q is not a state (one of %s)", st, strings.Join(store.States, ", ")))
			}
			f.States = append(f.States, st)
		}
	}
	for name, dst := range map[string]*uuid.UUID{"host_id": &f.HostID, "gpu_server_id": &f.GPUServerID} {
		if v, ok := c.GetQuery(name); ok {
			id, err := uuid.Parse(v)
			if err != nil {
				return f, invalid(name, "must be an id")
			}
			*dst = id
		}
	}
	for _, v := range c.QueryArray("condition") {
		for _, cond := range strings.Split(v, ",") {
			cf, err := store.ParseConditionFilter(cond)
			if err != nil {
				return f, invalid("condition", err.Error())
			}
			f.Conditions = append(f.Conditions, cf)
		}
	}
	if v, ok := c.GetQuery("include_deleted"); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return f, invalid("include_deleted", "must be true or false")
		}
		f.IncludeDeleted = b
	}
	return f, nil
}

func (s *Server) act(action string, status int) func(c *gin.Context) error {
	return func(c *gin.Context) error {
		if err := require(c, authn.RoleTenantAdmin, authn.RoleTenantMember, authn.RoleOperator); err != nil {
			return err
		}
		scope, id, err := scopedInstanceID(c)
		if err != nil {
			return err
		}
		p := principal(c)
		inst, err := s.store.Act(c.Request.Context(), scope, id, action, string(p.Role)+":"+p.UserID.String())
		if err != nil {
			return err
		}
		c.JSON(status, inst)
		return nil
	}
}

const jsonContentType = "application/json; charset=utf-8"
