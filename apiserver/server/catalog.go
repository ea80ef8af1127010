package server

import (
	"net/http"
	"regexp"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"gpucloud/apiserver/store"
	"gpucloud/internal/authn"
	"gpucloud/internal/validate"
)

// CreateGPUModelRequest adds a GPU model to the catalog.
type CreateGPUModelRequest struct {
	Name        string `json:"name"`
	MemoryBytes int64  `json:"memory_bytes"`
	NVMLMatch   string `json:"nvml_match"`
}

// SetTierRequest changes the shared tier's memory slice.
type SetTierRequest struct {
	MemorySliceBytes int64 `json:"memory_slice_bytes"`
}

// CreateInstanceTypeRequest adds an instance type with its hourly price in minor units.
type CreateInstanceTypeRequest struct {
	Name         string     `json:"name"`
	VCPUs        int        `json:"vcpus"`
	MemoryMiB    int        `json:"memory_mib"`
	DiskGiB      int        `json:"disk_gib"`
	GPUModelID   *uuid.UUID `json:"gpu_model_id,omitempty"`
	GPUCount     int        `json:"gpu_count"`
	Tier         string     `json:"tier"`
	PricePerHour int64      `json:"price_per_hour" required:"true" doc:"price per hour in integer minor units of currency (cents for USD)"`
	Currency     string     `json:"currency"`
}

var currencyRE = regexp.MustCompile(`^[A-Z]{3}$`)

func (s *Server) catalogRoutes(v1 *gin.RouterGroup) {
	v1.GET("/gpu-models", s.handle(func(c *gin.Context) error {
		ms, err := s.store.ListGPUModels(c.Request.Context())
		if err != nil {
			return err
		}
		c.JSON(http.StatusOK, page(ms, 0, func(m store.GPUModel) uuid.UUID { return m.ID }))
		return nil
	}))
	v1.GET("/gpu-models/:id", s.handle(func(c *gin.Context) error {
		id, err := pathID(c, "id")
		if err != nil {
			return err
		}
		m, err := s.store.GetGPUModel(c.Request.Context(), id)
		if err != nil {
			return err
		}
		c.JSON(http.StatusOK, m)
		return nil
	}))
	v1.POST("/gpu-models", s.handle(func(c *gin.Context) error {
		if err := require(c, authn.RoleOperator); err != nil {
			return err
		}
		var req CreateGPUModelRequest
		if err := bind(c, &req); err != nil {
			return err
		}
		var f fields
		f.label("name", req.Name, 1, 100)
		f.check(req.MemoryBytes > 0, "memory_bytes", "must be positive")
		f.label("nvml_match", req.NVMLMatch, 1, 100)
		if err := f.err(); err != nil {
			return err
		}
		m := store.GPUModel{Name: req.Name, MemoryBytes: req.MemoryBytes, NVMLMatch: req.NVMLMatch}
		if err := s.store.CreateGPUModel(c.Request.Context(), &m); err != nil {
			return err
		}
		c.JSON(http.StatusCreated, m)
		return nil
	}))
	v1.GET("/tiers", s.handle(func(c *gin.Context) error {
		ts, err := s.store.ListTiers(c.Request.Context())
		if err != nil {
			return err
		}
		c.JSON(http.StatusOK, Page[store.Tier]{Items: ts})
		return nil
	}))
	v1.PUT("/tiers/shared", s.handle(func(c *gin.Context) error {
		if err := require(c, authn.RoleOperator); err != nil {
			return err
		}
		var req SetTierRequest
		if err := bind(c, &req); err != nil {
			return err
		}
		if req.MemorySliceBytes <= 0 {
			return invalid("memory_slice_bytes", "must be positive")
		}
		if err := s.store.SetSharedSlice(c.Request.Context(), req.MemorySliceBytes); err != nil {
			return err
		}
		c.JSON(http.StatusOK, store.Tier{Name: "shared", MemorySliceBytes: &req.MemorySliceBytes})
		return nil
	}))
	v1.GET("/instance-types", s.handle(func(c *gin.Context) error {
		after, limit, err := pageArgs(c)
		if err != nil {
			return err
		}
		ts, err := s.store.ListInstanceTypes(c.Request.Context(), after, limit)
		if err != nil {
			return err
		}
		c.JSON(http.StatusOK, page(ts, limit, func(t store.InstanceType) uuid.UUID { return t.ID }))
		return nil
	}))
	v1.GET("/instance-types/:id", s.handle(func(c *gin.Context) error {
		id, err := pathID(c, "id")
		if err != nil {
			return err
		}
		t, err := s.store.GetInstanceType(c.Request.Context(), id)
		if err != nil {
			return err
		}
		c.JSON(http.StatusOK, t)
		return nil
	}))
	v1.POST("/instance-types", s.handle(s.createInstanceType))
}

func (s *Server) createInstanceType(c *gin.Context) error {
	if err := require(c, authn.RoleOperator); err != nil {
		return err
	}
	var req CreateInstanceTypeRequest
	if err := bind(c, &req); err != nil {
		return err
	}
	if req.Currency == "" {
		req.Currency = "USD"
	}
	var f fields
	f.check(validName(req.Name), "name", validate.NameRule)
	f.check(req.VCPUs > 0 && req.VCPUs <= 1024, "vcpus", "must be 1-1024")
	f.check(req.MemoryMiB > 0, "memory_mib", "must be positive")
	f.check(req.DiskGiB > 0, "disk_gib", "must be positive")
	f.check(req.GPUCount >= 0 && req.GPUCount <= 16, "gpu_count", "must be 0-16")
	f.check((req.GPUCount == 0) == (req.GPUModelID == nil), "gpu_model_id", "required exactly when gpu_count > 0")
	f.check(req.Tier == "dedicated" || req.Tier == "shared", "tier", "must be dedicated or shared")
	f.check(req.PricePerHour >= 0, "price_per_hour", "must not be negative (integer minor units)")
	f.check(currencyRE.MatchString(req.Currency), "currency", "must be an ISO 4217 code like USD")
	if err := f.err(); err != nil {
		return err
	}
	if req.GPUModelID != nil {
		if _, err := s.store.GetGPUModel(c.Request.Context(), *req.GPUModelID); err != nil {
			if err == store.ErrNotFound {
				return invalid("gpu_model_id", "no such GPU model")
			}
			return err
		}
	}
	t := store.InstanceType{Name: req.Name, VCPUs: req.VCPUs, MemoryMiB: req.MemoryMiB, DiskGiB: req.DiskGiB,
		GPUModelID: req.GPUModelID, GPUCount: req.GPUCount, Tier: req.Tier, PricePerHour: req.PricePerHour, Currency: req.Currency}
	if err := s.store.CreateInstanceType(c.Request.Context(), &t); err != nil {
		return err
	}
	c.JSON(http.StatusCreated, t)
	return nil
}
