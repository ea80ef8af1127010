package server

import (
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"
	"golang.org/x/crypto/ssh"
	"gopkg.in/yaml.v3"

	"gpucloud/apiserver/store"
	"gpucloud/internal/authn"
)

// CreateSSHKeyRequest adds an SSH public key to the caller's keys.
type CreateSSHKeyRequest struct {
	// Name tells the caller's keys apart (1-63 characters).
	Name string `json:"name" required:"true"`
	// PublicKey is one line of an authorized_keys file: "ssh-ed25519 AAAA... comment".
	PublicKey string `json:"public_key" required:"true" doc:"one authorized_keys line, without options"`
}

// Limits of what a create may carry into a VM's seed.
const (
	maxUserDataBytes = 16 << 10
	maxSSHKeyIDs     = 10
)

// parseSSHKey validates one authorized_keys line and returns it normalized (type, key, comment)
// with its SHA256 fingerprint; options (from="...", command=...) are refused.
func parseSSHKey(line string) (normalized, fingerprint string, ok bool) {
	line = strings.TrimSpace(line)
	if line == "" || len(line) > 16384 || strings.ContainsAny(line, "\n\r") {
		return "", "", false
	}
	pub, comment, opts, rest, err := ssh.ParseAuthorizedKey([]byte(line))
	if err != nil || len(opts) > 0 || len(rest) > 0 {
		return "", "", false
	}
	normalized = strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub)))
	if comment = strings.TrimSpace(comment); comment != "" && !strings.ContainsAny(comment, "\"'\\\x00") {
		normalized += " " + comment
	}
	return normalized, ssh.FingerprintSHA256(pub), true
}

// validUserData accepts at most 16 KiB of "#cloud-config" YAML (a mapping) or a "#!" script.
func validUserData(s string) (string, bool) {
	if len(s) > maxUserDataBytes {
		return "at most 16384 bytes", false
	}
	if strings.ContainsRune(s, 0) {
		return "must not contain NUL bytes", false
	}
	switch {
	case strings.HasPrefix(s, "#!"):
		return "", true
	case strings.HasPrefix(s, "#cloud-config"):
		var doc map[string]any
		if err := yaml.Unmarshal([]byte(s), &doc); err != nil {
			return "not valid YAML: " + err.Error(), false
		}
		return "", true
	}
	return `must start with "#cloud-config" (YAML) or "#!" (a script)`, false
}

func (s *Server) sshKeyRoutes(v1 *gin.RouterGroup) {
	v1.GET("/ssh-keys", s.handle(func(c *gin.Context) error {
		if err := require(c, authn.RoleTenantAdmin, authn.RoleTenantMember); err != nil {
			return err
		}
		keys, err := s.store.ListSSHKeys(c.Request.Context(), principal(c).UserID)
		if err != nil {
			return err
		}
		c.JSON(http.StatusOK, page(keys, 0, func(k store.SSHKey) uuid.UUID { return k.ID }))
		return nil
	}))
	v1.GET("/ssh-keys/:id", s.handle(func(c *gin.Context) error {
		if err := require(c, authn.RoleTenantAdmin, authn.RoleTenantMember); err != nil {
			return err
		}
		id, err := pathID(c, "id")
		if err != nil {
			return err
		}
		k, err := s.store.GetSSHKey(c.Request.Context(), principal(c).UserID, id)
		if err != nil {
			return err
		}
		c.JSON(http.StatusOK, k)
		return nil
	}))
	v1.POST("/ssh-keys", s.handle(s.createSSHKey))
	v1.DELETE("/ssh-keys/:id", s.handle(func(c *gin.Context) error {
		if err := require(c, authn.RoleTenantAdmin, authn.RoleTenantMember); err != nil {
			return err
		}
		id, err := pathID(c, "id")
		if err != nil {
			return err
		}
		if err := s.store.DeleteSSHKey(c.Request.Context(), principal(c).UserID, id); err != nil {
			return err
		}
		c.Status(http.StatusNoContent)
		return nil
	}))
}

func (s *Server) createSSHKey(c *gin.Context) error {
	if err := require(c, authn.RoleTenantAdmin, authn.RoleTenantMember); err != nil {
		return err
	}
	var req CreateSSHKeyRequest
	if err := bind(c, &req); err != nil {
		return err
	}
	key, fp, keyOK := parseSSHKey(req.PublicKey)
	var f fields
	f.check(req.Name != "" && len(req.Name) <= 63 && !strings.ContainsAny(req.Name, "\n\r\x00"), "name", "1-63 characters on one line")
	f.check(keyOK, "public_key", "must be one OpenSSH public key line (ssh-ed25519, ssh-rsa, ecdsa-sha2-*), without options")
	if err := f.err(); err != nil {
		return err
	}
	p := principal(c)
	k := store.SSHKey{UserID: p.UserID, TenantID: p.TenantID, Name: req.Name, PublicKey: key, Fingerprint: fp}
	if err := s.store.CreateSSHKey(c.Request.Context(), &k); err != nil {
		return err
	}
	c.Header("Location", "/v1/ssh-keys/"+k.ID.String())
	c.JSON(http.StatusCreated, k)
	return nil
}
