package server

import (
	"context"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"gpucloud/apiserver/store"
	"gpucloud/internal/authn"
	"gpucloud/internal/validate"
)

// CreateDaemonRequest names a new host or GPU server.
type CreateDaemonRequest struct {
	Name string `json:"name"`
}

// NewDaemon is a registered daemon with its credential, returned once.
type NewDaemon struct {
	ID         uuid.UUID `json:"id"`
	Name       string    `json:"name"`
	Credential string    `json:"credential"`
}

// AuditPage is a page of the audit log.
type AuditPage struct {
	Items      []store.AuditEntry `json:"items"`
	NextCursor string             `json:"next_cursor,omitempty"`
}

func (s *Server) fleetRoutes(v1 *gin.RouterGroup) {
	s.daemonRoutes(v1, "/hosts", store.KindHost,
		func(c *gin.Context, id uuid.UUID) (any, error) { return s.store.GetHost(c.Request.Context(), id) },
		func(c *gin.Context, after uuid.UUID, limit int) (any, error) {
			hs, err := s.store.ListHosts(c.Request.Context(), after, limit)
			return page(hs, limit, func(h store.Host) uuid.UUID { return h.ID }), err
		})
	s.daemonRoutes(v1, "/gpu-servers", store.KindGPUServer,
		func(c *gin.Context, id uuid.UUID) (any, error) { return s.store.GetGPUServer(c.Request.Context(), id) },
		func(c *gin.Context, after uuid.UUID, limit int) (any, error) {
			gs, err := s.store.ListGPUServers(c.Request.Context(), after, limit)
			return page(gs, limit, func(g store.GPUServer) uuid.UUID { return g.ID }), err
		})
	v1.GET("/audit-events", s.handle(s.listAudit))
}

func (s *Server) daemonRoutes(v1 *gin.RouterGroup, base string, kind store.Kind,
	get func(*gin.Context, uuid.UUID) (any, error), list func(*gin.Context, uuid.UUID, int) (any, error)) {
	v1.POST(base, s.handle(func(c *gin.Context) error {
		if err := require(c, authn.RoleOperator); err != nil {
			return err
		}
		var req CreateDaemonRequest
		if err := bind(c, &req); err != nil {
			return err
		}
		if !validName(req.Name) {
			return invalid("name", validate.NameRule)
		}
		id, cred, err := s.store.CreateDaemon(c.Request.Context(), kind, req.Name)
		if err != nil {
			return err
		}
		c.JSON(http.StatusCreated, NewDaemon{ID: id, Name: req.Name, Credential: cred})
		return nil
	}))
	v1.GET(base, s.handle(func(c *gin.Context) error {
		if err := require(c, authn.RoleOperator); err != nil {
			return err
		}
		after, limit, err := pageArgs(c)
		if err != nil {
			return err
		}
		p, err := list(c, after, limit)
		if err != nil {
			return err
		}
		c.JSON(http.StatusOK, p)
		return nil
	}))
	v1.GET(base+"/:id", s.handle(func(c *gin.Context) error {
		if err := require(c, authn.RoleOperator); err != nil {
			return err
		}
		id, err := pathID(c, "id")
		if err != nil {
			return err
		}
		v, err := get(c, id)
		if err != nil {
			return err
		}
		c.JSON(http.StatusOK, v)
		return nil
	}))
	flag := func(action string) gin.HandlerFunc {
		return s.handle(func(c *gin.Context) error {
			if err := require(c, authn.RoleOperator); err != nil {
				return err
			}
			id, err := pathID(c, "id")
			if err != nil {
				return err
			}
			if err := s.store.SetDaemonFlag(c.Request.Context(), kind, id, action); err != nil {
				return err
			}
			if action == "delete" {
				c.Status(http.StatusNoContent)
				return nil
			}
			v, err := get(c, id)
			if err != nil {
				return err
			}
			c.JSON(http.StatusOK, v)
			return nil
		})
	}
	for _, a := range []string{"cordon", "uncordon", "drain"} {
		if a == "drain" && kind == store.KindGPUServer {
			v1.POST(base+"/:id/drain", s.handle(s.drainGPUServer)) // drain.go: {"move": true} moves work
			v1.GET(base+"/:id/drain", s.handle(s.drainStatus(func(ctx context.Context, id uuid.UUID) (any, error) {
				return s.store.DrainStatus(ctx, id)
			})))
			continue
		}
		if a == "drain" && kind == store.KindHost {
			v1.POST(base+"/:id/drain", s.handle(s.drainHost)) // hostdrain.go: {"move": true} moves VMs
			v1.GET(base+"/:id/drain", s.handle(s.drainStatus(func(ctx context.Context, id uuid.UUID) (any, error) {
				return s.store.HostDrainStatus(ctx, id)
			})))
			continue
		}
		v1.POST(base+"/:id/"+a, flag(a))
	}
	v1.DELETE(base+"/:id", flag("delete"))
}

func (s *Server) listAudit(c *gin.Context) error {
	p := principal(c)
	if err := require(c, authn.RoleOperator, authn.RoleFinance, authn.RoleTenantAdmin); err != nil {
		return err
	}
	var after int64
	if cur := c.Query("cursor"); cur != "" {
		var err error
		if after, err = strconv.ParseInt(cur, 10, 64); err != nil || after < 0 {
			return invalid("cursor", "not a cursor from a previous page")
		}
	}
	limit, err := limitArg(c)
	if err != nil {
		return err
	}
	tenant := uuid.Nil
	if p.Role == authn.RoleTenantAdmin {
		tenant = p.TenantID // a tenant admin sees their tenant's changes only
	}
	es, err := s.store.ListAudit(c.Request.Context(), tenant, after, limit)
	if err != nil {
		return err
	}
	out := AuditPage{Items: es}
	if out.Items == nil {
		out.Items = []store.AuditEntry{}
	}
	if len(es) == limit {
		out.NextCursor = strconv.FormatInt(es[len(es)-1].ID, 10)
	}
	c.JSON(http.StatusOK, out)
	return nil
}
