package guesttest

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

func TestMapsParser(t *testing.T) {
	out, err := exec.Command(filepath.Join(buildAll(t), "maps_test")).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "maps_test: OK") {
		t.Fatalf("maps_test: %v\n%s", err, out)
	}
}

// mapsServer is one running "maps_test serve", fed lines one at a time.
type mapsServer struct {
	mu  sync.Mutex
	in  io.Writer
	out *bufio.Reader
}

var (
	mapsOnce sync.Once
	mapsSrv  *mapsServer
	mapsErr  error
)

// startMapsServer builds maps_test alone (a fuzz worker process must not wait for buildAll) and
// starts it; it exits when this process does (its stdin closes).
func startMapsServer(tb testing.TB) *mapsServer {
	mapsOnce.Do(func() {
		dir, err := os.MkdirTemp("", "gpucloud-maps-")
		if err != nil {
			mapsErr = err
			return
		}
		bin := filepath.Join(dir, "maps_test")
		out, err := exec.Command("gcc", "-O1", "-I../include", "-o", bin, "../tests/maps_test.c", "../transport/maps.c").CombinedOutput()
		if err != nil {
			os.RemoveAll(dir)
			mapsErr = fmt.Errorf("building maps_test: %v\n%s", err, out)
			return
		}
		cmd := exec.Command(bin, "serve")
		in, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe()
		mapsErr = cmd.Start()
		os.RemoveAll(dir) // a running program keeps its file
		if mapsErr == nil {
			mapsSrv = &mapsServer{in: in, out: bufio.NewReader(stdout)}
		}
	})
	if mapsErr != nil {
		tb.Fatal(mapsErr)
	}
	return mapsSrv
}

func (m *mapsServer) parse(tb testing.TB, line []byte) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var h [4]byte
	binary.LittleEndian.PutUint32(h[:], uint32(len(line)))
	if _, err := m.in.Write(append(h[:], line...)); err != nil {
		tb.Fatal(err)
	}
	s, err := m.out.ReadString('\n')
	if err != nil {
		tb.Fatalf("maps_test serve on %q: %v", line, err)
	}
	return strings.TrimSuffix(s, "\n")
}

// goParseMapsLine is the same grammar read independently: "lo-hi perms offset major:minor inode",
// then optionally spaces and a path.
func goParseMapsLine(b []byte) string {
	s := string(b)
	i := 0
	num := func(base int, stop byte) (uint64, bool) {
		j := i
		for j < len(s) && digit(s[j], base) {
			j++
		}
		if j == i || (stop != 0 && (j >= len(s) || s[j] != stop)) {
			return 0, false
		}
		v, err := strconv.ParseUint(s[i:j], base, 64)
		if err != nil {
			return 0, false
		}
		i = j
		if stop != 0 {
			i++
		}
		return v, true
	}
	lo, ok1 := num(16, '-')
	hi, ok2 := num(16, ' ')
	if !ok1 || !ok2 || hi < lo || i+4 > len(s) {
		return "ERR"
	}
	perms := s[i : i+4]
	i += 4
	if i >= len(s) || s[i] != ' ' {
		return "ERR"
	}
	i++
	off, ok3 := num(16, ' ')
	major, ok4 := num(16, ':')
	minor, ok5 := num(16, ' ')
	inode, ok6 := num(10, 0)
	if !ok3 || !ok4 || !ok5 || !ok6 || (i < len(s) && s[i] != ' ') {
		return "ERR"
	}
	path := strings.TrimLeft(s[i:], " ")
	anonDev := major == 0 && minor == 0
	private := perms == "rw-p" && inode == 0 && anonDev &&
		(path == "" || path == "[heap]" || (len(path) > 7 && strings.HasPrefix(path, "[anon:") && strings.HasSuffix(path, "]")))
	return fmt.Sprintf("OK %x %x %x %x %d %d %d %d", lo, hi, perms, off, inode, b2i(anonDev), len(path), b2i(private))
}

func digit(c byte, base int) bool {
	switch {
	case c >= '0' && c <= '9':
		return true
	case base == 16 && (c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'):
		return true
	}
	return false
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// FuzzMapsLine: the C parser and an independent Go reading of the same grammar agree on every
// line, and the C side survives anything.
func FuzzMapsLine(f *testing.F) {
	for _, s := range []string{
		"7f0000000000-7f0000002000 rw-p 00000000 00:00 0 ",
		"55d0c0000000-55d0c0021000 rw-p 00000000 00:00 0                          [heap]",
		"7f0000000000-7f0000001000 rw-s 00000000 00:01 1234 /memfd:gpucloud-shm-s (deleted)",
		"7f0000000000-7f0000001000 rw-p 00000000 00:00 0 [anon:x]",
		"ffffffffffffffff-ffffffffffffffff ---p 0 0:0 18446744073709551615",
		"2000-1000 rw-p 0 00:00 0", "", "1-2 ab",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		if len(line) > 4096 {
			return
		}
		srv := startMapsServer(t)
		if got, want := srv.parse(t, line), goParseMapsLine(line); got != want {
			t.Fatalf("line %q: C %q, Go %q", line, got, want)
		}
	})
}
