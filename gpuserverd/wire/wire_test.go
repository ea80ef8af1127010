package wire

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	msgs := []Message{
		&Hello{Version: Version, Token: "gct1.abc.def"},
		&MemcpyHtoD{Dst: 0x7f0000001000, Stream: 3, Async: 1, Data: []byte{1, 2, 3}},
		&FuncParamLayoutReply{Result: 0, Offsets: []uint32{0, 8, 16}, Sizes: []uint32{8, 8, 4}},
		&ElapsedReply{Milliseconds: 1.5},
		&DriverVersion{},
	}
	for _, m := range msgs {
		frame := AppendFrame(nil, m, FlagNoReply, 42)
		h, p, err := ReadFrame(bytes.NewReader(frame), nil)
		if err != nil {
			t.Fatalf("%T: %v", m, err)
		}
		if h.Type != m.Type() || h.Flags != FlagNoReply || h.Request != 42 || int(h.Length) != len(p) {
			t.Fatalf("%T: header %+v", m, h)
		}
		got, err := Decode(h.Type, p)
		if err != nil {
			t.Fatalf("%T: %v", m, err)
		}
		if !bytes.Equal(got.Append(nil), m.Append(nil)) {
			t.Fatalf("%T: round trip changed the message: %+v -> %+v", m, m, got)
		}
	}
}

func TestDecodeErrorsNameTheField(t *testing.T) {
	long := (&Hello{Version: 1, Token: strings.Repeat("x", 4097)}).Append(nil)
	cases := []struct {
		name string
		t    Type
		p    []byte
		want string
	}{
		{"token over limit", TypeHello, long, "Hello.token: length 4097 exceeds limit 4096"},
		{"truncated", TypeMemAlloc, []byte{1, 2, 3}, "MemAlloc.bytes: truncated"},
		{"trailing", TypeMemFree, make([]byte, 9), "MemFree: 1 unexpected trailing bytes"},
		{"count past data", TypeFuncParamLayoutReply, []byte{0, 0, 0, 0, 5, 0, 0, 0}, "FuncParamLayoutReply.offsets: truncated"},
		{"unknown type", Type(9999), nil, "unknown message type 9999"},
	}
	for _, tc := range cases {
		_, err := Decode(tc.t, tc.p)
		if !errors.Is(err, ErrDecode) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want error containing %q", tc.name, err, tc.want)
		}
	}
	big := AppendHeader(nil, TypeModuleLoad, 0, 1, MaxFrame+1)
	if _, _, err := ReadFrame(bytes.NewReader(big), nil); err == nil || !strings.Contains(err.Error(), "exceeds limit") {
		t.Errorf("oversized frame: got %v", err)
	}
}

// TestGeneratedFilesFresh regenerates into a temporary directory and compares, so a spec edit
// without `go generate` fails here.
func TestGeneratedFilesFresh(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command("go", "run", "./gen", "-spec", "spec/messages.spec",
		"-go", filepath.Join(dir, "messages_gen.go"), "-c", dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("generator: %v\n%s", err, out)
	}
	for gen, committed := range map[string]string{
		"messages_gen.go": "messages_gen.go",
		"wire_gen.h":      "../guest/wire_gen.h",
		"wire_gen.c":      "../guest/wire_gen.c",
	} {
		want, _ := os.ReadFile(filepath.Join(dir, gen))
		have, err := os.ReadFile(committed)
		if err != nil || !bytes.Equal(want, have) {
			t.Errorf("%s is stale: run go generate ./gpuserverd/wire", committed)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(AppendFrame(nil, &Hello{Version: 1, Token: "t"}, 0, 1))
	f.Add(AppendFrame(nil, &FuncParamLayoutReply{Offsets: []uint32{1}, Sizes: []uint32{2}}, 0, 1))
	f.Add(AppendFrame(nil, &LaunchKernel{Function: 1, GridX: 1, Params: []byte{1, 2}}, FlagNoReply, 7))
	f.Add(AppendFrame(nil, &Resume{Version: 1, SessionID: "s", Secret: make([]byte, 32), Received: 1 << 40}, 0, 0))
	f.Add(AppendFrame(nil, &ResumeOpenReply{WindowMs: 30000, Secret: make([]byte, 32)}, 0, 2))
	f.Add(AppendFrame(nil, &GraphAddConditionalNode{Graph: 1, Deps: make([]byte, 16), Handle: 9, CondType: 2, Size: 4}, 0, 3))
	f.Add(AppendFrame(nil, &GraphConditionalNodeReply{Node: 2, Bodies: make([]byte, 32)}, 0, 3))
	f.Add(AppendFrame(nil, &CaptureGraphReply{Status: 1, ID: 4, Graph: 5, Deps: make([]byte, 8)}, 0, 4))
	f.Add(AppendFrame(nil, &GraphAddMemAllocNode{Graph: 1, Bytes: 1 << 20, AllocType: 1, LocationType: 1}, 0, 5))
	f.Fuzz(func(t *testing.T, frame []byte) {
		h, p, err := ReadFrame(bytes.NewReader(frame), nil)
		if err != nil {
			return
		}
		m, err := Decode(h.Type, p)
		if err != nil {
			if !errors.Is(err, ErrDecode) {
				t.Fatalf("decode error not ErrDecode: %v", err)
			}
			return
		}
		// A message that decodes re-encodes to the same payload.
		if again := m.Append(nil); !bytes.Equal(again, p) {
			t.Fatalf("%s: re-encoding differs", h.Type)
		}
	})
}
