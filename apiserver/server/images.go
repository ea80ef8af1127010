package server

import (
	"net/http"
	"net/url"
	"regexp"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"gpucloud/apiserver/store"
	"gpucloud/internal/authn"
)

// CreateImageRequest registers an image (operator).
type CreateImageRequest struct {
	// Name instances use to ask for the image: lower-case letters, digits, '.', '_' and '-'.
	Name string `json:"name" required:"true"`
	// Source is file:///absolute/path (on every host) or an http(s):// URL hostd fetches.
	Source string `json:"source" required:"true" doc:"file:///absolute/path on every host, or an http(s):// URL"`
	// SHA256 of the image's bytes, 64 lower-case hex digits; hostd refuses an image that differs.
	SHA256 string `json:"sha256" required:"true" doc:"SHA-256 of the image's bytes, 64 lower-case hex digits"`
	// MinDiskGiB is the smallest disk (GiB) an instance of this image needs.
	MinDiskGiB int `json:"min_disk_gib" required:"true" doc:"smallest disk the image needs, in GiB"`
	// GuestLibraries: the image carries gpucloud's guest library and runtime libraries.
	GuestLibraries bool   `json:"guest_libraries"`
	Description    string `json:"description,omitempty"`
}

var (
	imageNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)
	sha256RE    = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// validImageSource accepts file:///absolute/path and http(s)://host/... without spaces.
func validImageSource(s string) bool {
	if len(s) > 2048 {
		return false
	}
	u, err := url.Parse(s)
	if err != nil {
		return false
	}
	switch u.Scheme {
	case "file":
		return u.Host == "" && len(u.Path) > 1 && u.Path[0] == '/'
	case "http", "https":
		return u.Host != ""
	}
	return false
}

func (s *Server) imageRoutes(v1 *gin.RouterGroup) {
	v1.GET("/images", s.handle(func(c *gin.Context) error {
		list, err := s.store.ListImages(c.Request.Context())
		if err != nil {
			return err
		}
		for i := range list {
			list[i] = visibleImage(c, list[i])
		}
		c.JSON(http.StatusOK, page(list, 0, func(m store.Image) uuid.UUID { return m.ID }))
		return nil
	}))
	v1.GET("/images/:id", s.handle(func(c *gin.Context) error {
		id, err := pathID(c, "id")
		if err != nil {
			return err
		}
		m, err := s.store.GetImage(c.Request.Context(), id)
		if err != nil {
			return err
		}
		c.JSON(http.StatusOK, visibleImage(c, m))
		return nil
	}))
	v1.POST("/images", s.handle(s.createImage))
	v1.DELETE("/images/:id", s.handle(func(c *gin.Context) error {
		if err := require(c, authn.RoleOperator); err != nil {
			return err
		}
		id, err := pathID(c, "id")
		if err != nil {
			return err
		}
		if err := s.store.DeleteImage(c.Request.Context(), id); err != nil {
			return err
		}
		c.Status(http.StatusNoContent)
		return nil
	}))
}

// visibleImage hides an image's source from everyone but operators: a mirror's address is
// the platform's business.
func visibleImage(c *gin.Context, m store.Image) store.Image {
	if principal(c).Role != authn.RoleOperator {
		m.Source = ""
	}
	return m
}

func (s *Server) createImage(c *gin.Context) error {
	if err := require(c, authn.RoleOperator); err != nil {
		return err
	}
	var req CreateImageRequest
	if err := bind(c, &req); err != nil {
		return err
	}
	var f fields
	f.check(imageNameRE.MatchString(req.Name), "name", "1-63 characters: lower-case letters, digits, '.', '_' and '-', starting with a letter or digit")
	f.check(validImageSource(req.Source), "source", "file:///absolute/path or an http(s):// URL")
	f.check(sha256RE.MatchString(req.SHA256), "sha256", "64 lower-case hexadecimal digits")
	f.check(req.MinDiskGiB >= 1 && req.MinDiskGiB <= 65536, "min_disk_gib", "1-65536")
	f.check(len(req.Description) <= 1024, "description", "at most 1024 characters")
	if err := f.err(); err != nil {
		return err
	}
	m := store.Image{Name: req.Name, Source: req.Source, SHA256: req.SHA256, MinDiskGiB: req.MinDiskGiB,
		GuestLibraries: req.GuestLibraries, Description: req.Description}
	if err := s.store.CreateImage(c.Request.Context(), &m); err != nil {
		return err
	}
	c.Header("Location", "/v1/images/"+m.ID.String())
	c.JSON(http.StatusCreated, m)
	return nil
}
