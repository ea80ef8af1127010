package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// `gpuserverd sessions` sends each operation to the admin route it names, with the admin token
// from the data dir and the session token from its file; a refusal is an error carrying why.
func TestSessionsCommand(t *testing.T) {
	type seen struct{ method, path, auth, body string }
	var got []seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, seen{r.Method, r.URL.Path, r.Header.Get("Authorization"), string(b)})
		if strings.Contains(r.URL.Path, "nobody") {
			http.Error(w, `{"error":"no such session"}`, http.StatusNotFound)
			return
		}
		w.Write([]byte(`{"ok":true}`))
	}))
	defer srv.Close()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "admin-token"), []byte("adm1n\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "b.tok"), []byte("tok-for-b\n"), 0o600)
	flags := []string{"--admin", strings.TrimPrefix(srv.URL, "http://"), "--data-dir", dir}
	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := sessionsCmd(context.Background(), append(append([]string(nil), flags...), args...), &out)
		return out.String(), err
	}
	for _, args := range [][]string{
		{"list"},
		{"--stop", "checkpoint", "s1"},
		{"migrate", "s1", "10.0.0.2:7070", filepath.Join(dir, "b.tok")},
		{"restore", "/var/lib/gpuserverd/checkpoints/x.img", filepath.Join(dir, "b.tok")},
	} {
		if out, err := run(args...); err != nil || out != `{"ok":true}` {
			t.Fatalf("%v: %q %v", args, out, err)
		}
	}
	want := []seen{
		{"GET", "/admin/sessions", "Bearer adm1n", ""},
		{"POST", "/admin/sessions/s1/checkpoint", "Bearer adm1n", `{"stop":true}`},
		{"POST", "/admin/sessions/s1/migrate", "Bearer adm1n", `{"target":"10.0.0.2:7070","token":"tok-for-b"}`},
		{"POST", "/admin/restore", "Bearer adm1n", `{"path":"/var/lib/gpuserverd/checkpoints/x.img","token":"tok-for-b"}`},
	}
	for i := range want {
		var a, b any
		json.Unmarshal([]byte(got[i].body), &a)
		json.Unmarshal([]byte(want[i].body), &b)
		g, w := got[i], want[i]
		if g.method != w.method || g.path != w.path || g.auth != w.auth || (w.body != "" && !jsonEqual(a, b)) {
			t.Errorf("request %d: %+v, want %+v", i, g, w)
		}
	}
	if _, err := run("checkpoint", "nobody"); err == nil || !strings.Contains(err.Error(), "no such session") {
		t.Fatalf("a refused checkpoint: %v", err)
	}
	for _, bad := range [][]string{{}, {"migrate", "s1"}, {"frobnicate"}, {"migrate", "s1", "t:1", filepath.Join(dir, "missing.tok")}} {
		if _, err := run(bad...); err == nil {
			t.Errorf("%v: accepted", bad)
		}
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}
