package server

import (
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"gpucloud/apiserver/store"
	"gpucloud/internal/authn"
)

// CreateVolumeRequest creates a volume of the caller's tenant.
type CreateVolumeRequest struct {
	// Name tells the tenant's volumes apart (1-63 characters).
	Name    string `json:"name" required:"true"`
	SizeGiB int    `json:"size_gib" required:"true" doc:"size in GiB, 1-16384"`
}

// AttachVolumeRequest names the instance a volume is attached to.
type AttachVolumeRequest struct {
	InstanceID string `json:"instance_id" required:"true" doc:"an instance of the caller's tenant, on the volume's host once it has one"`
}

const maxVolumeGiB = 16384

func (s *Server) volumeRoutes(v1 *gin.RouterGroup) {
	v1.GET("/volumes", s.handle(func(c *gin.Context) error {
		if err := require(c, authn.RoleTenantAdmin, authn.RoleTenantMember); err != nil {
			return err
		}
		vols, err := s.store.ListVolumes(c.Request.Context(), principal(c).TenantID)
		if err != nil {
			return err
		}
		c.JSON(http.StatusOK, page(vols, 0, func(v store.Volume) uuid.UUID { return v.ID }))
		return nil
	}))
	v1.GET("/volumes/:id", s.handle(s.volumeOp(func(c *gin.Context, tenant, id uuid.UUID) (store.Volume, error) {
		return s.store.GetVolume(c.Request.Context(), tenant, id)
	})))
	v1.POST("/volumes", s.handle(s.createVolume))
	v1.POST("/volumes/:id/attach", s.handle(s.volumeOp(func(c *gin.Context, tenant, id uuid.UUID) (store.Volume, error) {
		var req AttachVolumeRequest
		if err := bind(c, &req); err != nil {
			return store.Volume{}, err
		}
		inst, err := uuid.Parse(req.InstanceID)
		if err != nil {
			return store.Volume{}, invalid("instance_id", "must be an instance id")
		}
		return s.store.AttachVolume(c.Request.Context(), tenant, id, inst)
	})))
	v1.POST("/volumes/:id/detach", s.handle(s.volumeOp(func(c *gin.Context, tenant, id uuid.UUID) (store.Volume, error) {
		return s.store.DetachVolume(c.Request.Context(), tenant, id)
	})))
	v1.DELETE("/volumes/:id", s.handle(func(c *gin.Context) error {
		if err := require(c, authn.RoleTenantAdmin, authn.RoleTenantMember); err != nil {
			return err
		}
		id, err := pathID(c, "id")
		if err != nil {
			return err
		}
		if err := s.store.DeleteVolume(c.Request.Context(), principal(c).TenantID, id); err != nil {
			return err
		}
		c.Status(http.StatusNoContent)
		return nil
	}))
}

// volumeOp is a tenant's operation on one of its volumes by path id, answered with the volume.
func (s *Server) volumeOp(op func(c *gin.Context, tenant, id uuid.UUID) (store.Volume, error)) func(*gin.Context) error {
	return func(c *gin.Context) error {
		if err := require(c, authn.RoleTenantAdmin, authn.RoleTenantMember); err != nil {
			return err
		}
		id, err := pathID(c, "id")
		if err != nil {
			return err
		}
		v, err := op(c, principal(c).TenantID, id)
		if err != nil {
			return err
		}
		c.JSON(http.StatusOK, v)
		return nil
	}
}

func (s *Server) createVolume(c *gin.Context) error {
	if err := require(c, authn.RoleTenantAdmin, authn.RoleTenantMember); err != nil {
		return err
	}
	var req CreateVolumeRequest
	if err := bind(c, &req); err != nil {
		return err
	}
	var f fields
	f.check(req.Name != "" && len(req.Name) <= 63 && !strings.ContainsAny(req.Name, "\n\r\x00"), "name", "1-63 characters on one line")
	f.check(req.SizeGiB >= 1 && req.SizeGiB <= maxVolumeGiB, "size_gib", "must be 1-16384 (GiB)")
	if err := f.err(); err != nil {
		return err
	}
	v := store.Volume{TenantID: principal(c).TenantID, Name: req.Name, SizeGiB: req.SizeGiB}
	if err := s.store.CreateVolume(c.Request.Context(), &v); err != nil {
		return err
	}
	c.Header("Location", "/v1/volumes/"+v.ID.String())
	c.JSON(http.StatusCreated, v)
	return nil
}
