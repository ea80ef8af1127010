// Package transfer carries a VM's disks from the source host to the target host of a drain's
// move (docs/hostd.md, "A drain that moves VMs"). The source offers the files of each move it
// is making (Exports, served by Handler on hostd --transfer-listen); the target pulls them
// (Fetch) with the move's secret, which the apiserver hands to these two hosts only. A wrong
// secret or an unknown move is answered 404 alike, so a peer learns nothing by guessing.
package transfer

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// File is one file a move offers.
type File struct {
	Name string `json:"name"` // "disk", or "volume-<id>"
	Size int64  `json:"size"`
}

// Manifest lists a move's files.
type Manifest struct {
	Files []File `json:"files"`
}

// Total is the bytes of all the files.
func (m Manifest) Total() int64 {
	var n int64
	for _, f := range m.Files {
		n += f.Size
	}
	return n
}

type export struct {
	secret string
	files  map[string]string // name -> path
}

// Exports are the moves' files this host offers.
type Exports struct {
	mu    sync.Mutex
	moves map[string]export
}

// Offer makes a move's files (name -> path) available to a peer holding secret.
func (e *Exports) Offer(move, secret string, files map[string]string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.moves == nil {
		e.moves = map[string]export{}
	}
	cp := make(map[string]string, len(files))
	for k, v := range files {
		cp[k] = v
	}
	e.moves[move] = export{secret: secret, files: cp}
}

// Retain withdraws every offer but those of keep (the moves still open on this host).
func (e *Exports) Retain(keep map[string]bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for id := range e.moves {
		if !keep[id] {
			delete(e.moves, id)
		}
	}
}

// lookup returns the offer of move when secret is its own.
func (e *Exports) lookup(move, secret string) (export, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	x, ok := e.moves[move]
	if !ok || secret == "" || subtle.ConstantTimeCompare([]byte(x.secret), []byte(secret)) != 1 {
		return export{}, false
	}
	return x, true
}

// Handler serves GET /v1/moves/{id} (the manifest) and GET /v1/moves/{id}/files/{name}.
func (e *Exports) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/moves/{id}", func(w http.ResponseWriter, r *http.Request) {
		x, ok := e.lookup(r.PathValue("id"), bearer(r))
		if !ok {
			http.NotFound(w, r)
			return
		}
		var m Manifest
		for name, path := range x.files {
			st, err := os.Stat(path)
			if err != nil {
				http.Error(w, "a file of the move is unreadable", http.StatusInternalServerError)
				return
			}
			m.Files = append(m.Files, File{Name: name, Size: st.Size()})
		}
		sort.Slice(m.Files, func(i, j int) bool { return m.Files[i].Name < m.Files[j].Name })
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(m)
	})
	mux.HandleFunc("GET /v1/moves/{id}/files/{name}", func(w http.ResponseWriter, r *http.Request) {
		x, ok := e.lookup(r.PathValue("id"), bearer(r))
		path, has := x.files[r.PathValue("name")]
		if !ok || !has {
			http.NotFound(w, r)
			return
		}
		f, err := os.Open(path)
		if err != nil {
			http.Error(w, "the file is unreadable", http.StatusInternalServerError)
			return
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			http.Error(w, "the file is unreadable", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		http.ServeContent(w, r, "", st.ModTime(), f)
	})
	return mux
}

func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if !strings.HasPrefix(h, "Bearer ") {
		return ""
	}
	return strings.TrimPrefix(h, "Bearer ")
}

// Client pulls a move's files from its source.
type Client struct {
	HTTP *http.Client // nil: http.DefaultClient
}

func (c Client) get(ctx context.Context, endpoint, path, secret string) (*http.Response, error) {
	if strings.ContainsAny(endpoint, "/?#@ ") || endpoint == "" {
		return nil, fmt.Errorf("transfer: source endpoint %q is not host:port", endpoint)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+endpoint+path, nil)
	if err != nil {
		return nil, fmt.Errorf("transfer: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+secret)
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("transfer: GET %s from %s: %w", path, endpoint, err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("transfer: GET %s from %s: HTTP %d", path, endpoint, resp.StatusCode)
	}
	return resp, nil
}

// Manifest asks the source which files a move has.
func (c Client) Manifest(ctx context.Context, endpoint, move, secret string) (Manifest, error) {
	resp, err := c.get(ctx, endpoint, "/v1/moves/"+url.PathEscape(move), secret)
	if err != nil {
		return Manifest{}, err
	}
	defer resp.Body.Close()
	var m Manifest
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&m); err != nil {
		return Manifest{}, fmt.Errorf("transfer: manifest of move %s: %w", move, err)
	}
	for _, f := range m.Files {
		if f.Size < 0 {
			return Manifest{}, fmt.Errorf("transfer: manifest of move %s: file %q of size %d", move, f.Name, f.Size)
		}
	}
	return m, nil
}

// ErrShort is a file that ended before the size its manifest gave.
var ErrShort = errors.New("transfer: file shorter than its manifest says")

// Fetch copies one file of a move into dst: written under dst.part, synced, then renamed, so a
// copy cut off anywhere never looks finished. progress, if set, is called with the bytes so far.
func (c Client) Fetch(ctx context.Context, endpoint, move, secret string, f File, dst string, progress func(int64)) error {
	resp, err := c.get(ctx, endpoint, "/v1/moves/"+url.PathEscape(move)+"/files/"+url.PathEscape(f.Name), secret)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o711); err != nil {
		return fmt.Errorf("transfer: %w", err)
	}
	part := dst + ".part"
	out, err := os.OpenFile(part, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("transfer: %w", err)
	}
	n, err := io.Copy(out, &counter{r: io.LimitReader(resp.Body, f.Size), progress: progress})
	if err == nil && n != f.Size {
		err = fmt.Errorf("%w: %s: %d of %d bytes", ErrShort, f.Name, n, f.Size)
	}
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(part)
		return fmt.Errorf("transfer: fetch %s of move %s: %w", f.Name, move, err)
	}
	if err := os.Rename(part, dst); err != nil {
		return fmt.Errorf("transfer: %w", err)
	}
	return nil
}

type counter struct {
	r        io.Reader
	n        int64
	progress func(int64)
}

func (c *counter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.progress != nil && n > 0 {
		c.progress(c.n)
	}
	return n, err
}
