package server

import (
	"net/http"
	"net/mail"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"gpucloud/apiserver/store"
	"gpucloud/internal/authn"
	"gpucloud/internal/validate"
)

// CreateTenantRequest creates a tenant with its quotas.
type CreateTenantRequest struct {
	Name           string `json:"name"`
	QuotaInstances int    `json:"quota_instances"`
	QuotaGPUs      int    `json:"quota_gpus"`
	QuotaGPUMemory int64  `json:"quota_gpu_memory_bytes"`
}

// QuotaRequest sets a tenant's quotas. PUT replaces the quotas whole, so every field is
// required: a missing one would otherwise silently become 0.
type QuotaRequest struct {
	Instances      *int   `json:"instances" validate:"required"`
	GPUs           *int   `json:"gpus" validate:"required"`
	GPUMemoryBytes *int64 `json:"gpu_memory_bytes" validate:"required"`
	// Volumes and VolumeGiB limit the tenant's volumes (count, total GiB); absent: unchanged.
	Volumes   *int `json:"volumes,omitempty"`
	VolumeGiB *int `json:"volume_gib,omitempty" doc:"total GiB of the tenant's volumes"`
}

// CreateUserRequest invites a user.
type CreateUserRequest struct {
	Email    string     `json:"email"`
	Role     string     `json:"role"`
	TenantID *uuid.UUID `json:"tenant_id,omitempty"`
}

// CreateKeyRequest names a new API key.
type CreateKeyRequest struct {
	Name string `json:"name"`
}

// NewAPIKey is a key with its secret, returned once.
type NewAPIKey struct {
	store.APIKey
	Secret string `json:"secret"`
}

// Me is who the caller is.
type Me struct {
	UserID   *uuid.UUID `json:"user_id,omitempty"`
	TenantID *uuid.UUID `json:"tenant_id,omitempty"`
	DaemonID *uuid.UUID `json:"daemon_id,omitempty"`
	Role     string     `json:"role"`
}

func optional(id uuid.UUID) *uuid.UUID {
	if id == uuid.Nil {
		return nil
	}
	return &id
}

func (s *Server) accountRoutes(v1 *gin.RouterGroup) {
	v1.GET("/me", s.handle(func(c *gin.Context) error {
		p := principal(c)
		c.JSON(http.StatusOK, Me{UserID: optional(p.UserID), TenantID: optional(p.TenantID), DaemonID: optional(p.DaemonID), Role: string(p.Role)})
		return nil
	}))
	v1.POST("/tenants", s.handle(s.createTenant))
	v1.GET("/tenants", s.handle(func(c *gin.Context) error {
		if err := require(c, authn.RoleOperator, authn.RoleFinance); err != nil {
			return err
		}
		after, limit, err := pageArgs(c)
		if err != nil {
			return err
		}
		ts, err := s.store.ListTenants(c.Request.Context(), after, limit)
		if err != nil {
			return err
		}
		c.JSON(http.StatusOK, page(ts, limit, func(t store.Tenant) uuid.UUID { return t.ID }))
		return nil
	}))
	v1.GET("/tenants/:id", s.handle(func(c *gin.Context) error {
		id, err := pathID(c, "id")
		if err != nil {
			return err
		}
		if p := principal(c); !p.IsPlatform() && p.TenantID != id {
			return notFound("no such tenant")
		}
		t, err := s.store.GetTenant(c.Request.Context(), id)
		if err != nil {
			return err
		}
		c.JSON(http.StatusOK, t)
		return nil
	}))
	v1.PUT("/tenants/:id/quota", s.handle(s.setQuota))
	v1.POST("/users", s.handle(s.createUser))
	v1.GET("/users", s.handle(s.listUsers))
	v1.GET("/users/:id", s.handle(func(c *gin.Context) error {
		u, err := s.visibleUser(c)
		if err != nil {
			return err
		}
		c.JSON(http.StatusOK, u)
		return nil
	}))
	v1.POST("/users/:id/api-keys", s.handle(s.createKey))
	v1.GET("/users/:id/api-keys", s.handle(func(c *gin.Context) error {
		u, err := s.keyManagedUser(c)
		if err != nil {
			return err
		}
		after, limit, err := pageArgs(c)
		if err != nil {
			return err
		}
		ks, err := s.store.ListAPIKeys(c.Request.Context(), u.ID, after, limit)
		if err != nil {
			return err
		}
		c.JSON(http.StatusOK, page(ks, limit, func(k store.APIKey) uuid.UUID { return k.ID }))
		return nil
	}))
	v1.DELETE("/api-keys/:id", s.handle(s.revokeKey))
}

func (s *Server) createTenant(c *gin.Context) error {
	if err := require(c, authn.RoleOperator); err != nil {
		return err
	}
	var req CreateTenantRequest
	if err := bind(c, &req); err != nil {
		return err
	}
	var f fields
	f.check(validName(req.Name), "name", validate.NameRule)
	f.check(req.QuotaInstances >= 0, "quota_instances", "must not be negative")
	f.check(req.QuotaGPUs >= 0, "quota_gpus", "must not be negative")
	f.check(req.QuotaGPUMemory >= 0, "quota_gpu_memory_bytes", "must not be negative")
	if err := f.err(); err != nil {
		return err
	}
	t := store.Tenant{Name: req.Name, QuotaInstances: req.QuotaInstances, QuotaGPUs: req.QuotaGPUs, QuotaGPUMemoryBytes: req.QuotaGPUMemory}
	if err := s.store.CreateTenant(c.Request.Context(), &t); err != nil {
		return err
	}
	c.JSON(http.StatusCreated, t)
	return nil
}

func (s *Server) setQuota(c *gin.Context) error {
	if err := require(c, authn.RoleOperator); err != nil {
		return err
	}
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	var req QuotaRequest
	if err := bind(c, &req); err != nil {
		return err
	}
	var f fields
	f.check(*req.Instances >= 0, "instances", "must not be negative")
	f.check(*req.GPUs >= 0, "gpus", "must not be negative")
	f.check(*req.GPUMemoryBytes >= 0, "gpu_memory_bytes", "must not be negative")
	f.check(req.Volumes == nil || *req.Volumes >= 0, "volumes", "must not be negative")
	f.check(req.VolumeGiB == nil || *req.VolumeGiB >= 0, "volume_gib", "must not be negative")
	if err := f.err(); err != nil {
		return err
	}
	t, err := s.store.SetQuota(c.Request.Context(), id, *req.Instances, *req.GPUs, *req.GPUMemoryBytes, req.Volumes, req.VolumeGiB)
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, t)
	return nil
}

func (s *Server) createUser(c *gin.Context) error {
	p := principal(c)
	if err := require(c, authn.RoleOperator, authn.RoleTenantAdmin); err != nil {
		return err
	}
	var req CreateUserRequest
	if err := bind(c, &req); err != nil {
		return err
	}
	role := authn.Role(req.Role)
	var f fields
	_, mailErr := mail.ParseAddress(req.Email)
	f.check(mailErr == nil && len(req.Email) <= 254, "email", "must be an e-mail address")
	f.check(role.Valid(), "role", "must be tenant-admin, tenant-member, operator or finance")
	tenantRole := role == authn.RoleTenantAdmin || role == authn.RoleTenantMember
	if role.Valid() {
		f.check(tenantRole == (req.TenantID != nil), "tenant_id", "required for tenant roles, forbidden for platform roles")
	}
	if err := f.err(); err != nil {
		return err
	}
	if p.Role == authn.RoleTenantAdmin {
		// Tenant admins invite into their own tenant only.
		if !tenantRole {
			return forbidden("tenant admins can only invite tenant-admin or tenant-member users")
		}
		if *req.TenantID != p.TenantID {
			return invalid("tenant_id", "must be your own tenant")
		}
	} else if req.TenantID != nil {
		if _, err := s.store.GetTenant(c.Request.Context(), *req.TenantID); err != nil {
			if err == store.ErrNotFound {
				return invalid("tenant_id", "no such tenant")
			}
			return err
		}
	}
	u := store.User{Email: req.Email, Role: req.Role, TenantID: req.TenantID}
	if err := s.store.CreateUser(c.Request.Context(), &u); err != nil {
		return err
	}
	c.JSON(http.StatusCreated, u)
	return nil
}

func (s *Server) listUsers(c *gin.Context) error {
	p := principal(c)
	if err := require(c, authn.RoleOperator, authn.RoleTenantAdmin); err != nil {
		return err
	}
	after, limit, err := pageArgs(c)
	if err != nil {
		return err
	}
	tenant := p.TenantID
	if p.Role == authn.RoleOperator {
		if q := c.Query("tenant_id"); q != "" {
			if tenant, err = uuid.Parse(q); err != nil {
				return invalid("tenant_id", "must be a UUID")
			}
		}
	}
	us, err := s.store.ListUsers(c.Request.Context(), tenant, after, limit)
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, page(us, limit, func(u store.User) uuid.UUID { return u.ID }))
	return nil
}

// visibleUser loads the :id user if the caller may see it: themselves, their tenant's users
// (tenant admins), anyone (operators). Others get 404, not 403, so ids do not leak.
func (s *Server) visibleUser(c *gin.Context) (store.User, error) {
	id, err := pathID(c, "id")
	if err != nil {
		return store.User{}, err
	}
	u, err := s.store.GetUser(c.Request.Context(), id)
	if err != nil {
		return u, err
	}
	p := principal(c)
	switch {
	case p.UserID == u.ID, p.Role == authn.RoleOperator:
		return u, nil
	case p.Role == authn.RoleTenantAdmin && u.TenantID != nil && *u.TenantID == p.TenantID:
		return u, nil
	}
	return store.User{}, notFound("no such user")
}

// keyManagedUser is visibleUser for key management (daemons have no users).
func (s *Server) keyManagedUser(c *gin.Context) (store.User, error) {
	if principal(c).Role == authn.RoleDaemon {
		return store.User{}, forbidden("daemons have no API keys")
	}
	return s.visibleUser(c)
}

func (s *Server) createKey(c *gin.Context) error {
	u, err := s.keyManagedUser(c)
	if err != nil {
		return err
	}
	var req CreateKeyRequest
	if err := bind(c, &req); err != nil {
		return err
	}
	var f fields
	f.label("name", req.Name, 0, 100)
	if err := f.err(); err != nil {
		return err
	}
	k, secret, err := s.store.CreateAPIKey(c.Request.Context(), u, req.Name)
	if err != nil {
		return err
	}
	c.JSON(http.StatusCreated, NewAPIKey{APIKey: k, Secret: secret})
	return nil
}

func (s *Server) revokeKey(c *gin.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	k, owner, err := s.store.GetAPIKey(c.Request.Context(), id)
	if err != nil {
		return err
	}
	p := principal(c)
	allowed := p.UserID == owner.ID || p.Role == authn.RoleOperator ||
		(p.Role == authn.RoleTenantAdmin && owner.TenantID != nil && *owner.TenantID == p.TenantID)
	if !allowed {
		return notFound("no such api key")
	}
	if err := s.store.RevokeAPIKey(c.Request.Context(), k, owner); err != nil {
		return err
	}
	c.Status(http.StatusNoContent)
	return nil
}

func validName(s string) bool { return validate.Name(s) == nil }
