// Package images fetches the base images instances boot from, verifies each against the
// SHA-256 the operator registered, and keeps them in hostd's images dir. An image is used only
// once its bytes were seen to hash to the registered sum; a file that already sits in the dir
// (put there by hand or by an earlier hostd) is adopted when it hashes right.
package images

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// Cache is a directory of verified images, <name>.qcow2 with <name>.sha256 beside it.
type Cache struct {
	Dir    string
	Client *http.Client // nil: http.DefaultClient

	mu sync.Mutex // one fetch at a time: images are large and the host's link is shared
}

// Path is where the image of that name lives in the cache.
func (c *Cache) Path(name string) string { return filepath.Join(c.Dir, name+".qcow2") }

func (c *Cache) marker(name string) string { return filepath.Join(c.Dir, name+".sha256") }

// Ensure returns the path of image name whose bytes hash to sum, fetching it from source
// (file:///path or http(s)://) when the cache lacks it or holds other bytes.
func (c *Cache) Ensure(ctx context.Context, name, source, sum string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	path := c.Path(name)
	if got, err := os.ReadFile(c.marker(name)); err == nil && strings.TrimSpace(string(got)) == sum {
		if _, err := os.Stat(path); err == nil {
			return path, nil
		}
	}
	// A file already here (the operator's copy, or a cache whose marker was lost) is adopted when
	// its bytes are right, so that a source that is the cache itself is never fetched over.
	if got, err := hashFile(path); err == nil && got == sum {
		return path, c.writeMarker(name, sum)
	}
	if err := c.fetch(ctx, source, path, sum); err != nil {
		return "", fmt.Errorf("image %q: %w", name, err)
	}
	return path, c.writeMarker(name, sum)
}

func (c *Cache) writeMarker(name, sum string) error {
	if err := os.WriteFile(c.marker(name), []byte(sum+"\n"), 0o644); err != nil {
		return fmt.Errorf("images: record checksum of %s: %w", name, err)
	}
	return nil
}

// fetch copies source to path through a temporary file, hashing on the way; a wrong sum leaves
// nothing behind.
func (c *Cache) fetch(ctx context.Context, source, path, sum string) error {
	body, err := c.open(ctx, source)
	if err != nil {
		return err
	}
	defer body.Close()
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return fmt.Errorf("images dir: %w", err)
	}
	tmp, err := os.CreateTemp(c.Dir, ".fetch-*")
	if err != nil {
		return fmt.Errorf("images: temporary file: %w", err)
	}
	defer os.Remove(tmp.Name())
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(tmp, h), body); err != nil {
		tmp.Close()
		return fmt.Errorf("fetch %s: %w", source, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("fetch %s: %w", source, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sum {
		return fmt.Errorf("checksum mismatch: %s has sha256 %s, the image is registered with %s", source, got, sum)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("images: %w", err)
	}
	os.Remove(c.marker(filepath.Base(strings.TrimSuffix(path, ".qcow2"))))
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("images: install %s: %w", path, err)
	}
	return nil
}

func (c *Cache) open(ctx context.Context, source string) (io.ReadCloser, error) {
	u, err := url.Parse(source)
	if err != nil {
		return nil, fmt.Errorf("source %q: %w", source, err)
	}
	switch u.Scheme {
	case "file":
		if u.Host != "" || !filepath.IsAbs(u.Path) {
			return nil, fmt.Errorf("source %q: want file:///absolute/path", source)
		}
		f, err := os.Open(u.Path)
		if err != nil {
			return nil, fmt.Errorf("source: %w", err)
		}
		return f, nil
	case "http", "https":
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, source, nil)
		if err != nil {
			return nil, fmt.Errorf("source %q: %w", source, err)
		}
		cl := c.Client
		if cl == nil {
			cl = http.DefaultClient
		}
		resp, err := cl.Do(req)
		if err != nil {
			return nil, fmt.Errorf("fetch %s: %w", source, err)
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return nil, fmt.Errorf("fetch %s: %s", source, resp.Status)
		}
		return resp.Body, nil
	}
	return nil, fmt.Errorf("source %q: want file:// or http(s)://", source)
}

// hashFile is the hex SHA-256 of a file's bytes.
func hashFile(path string) (string, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	if err != nil {
		return "", fmt.Errorf("images: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("images: hash %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// HashFile is the hex SHA-256 of a file, as an operator registers it.
func HashFile(path string) (string, error) { return hashFile(path) }
