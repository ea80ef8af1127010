package cuda

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// The module-scope .global and .const definitions are named, in a statement of several variables
// too; declarations, texture references and a function's locals are not.
func TestModuleGlobalNamesOfPTX(t *testing.T) {
	ptx := ptxWithGlobals + "\n.global .align 4 .u32 a, b[2], c = 3;\n.global .texref tex;\n"
	got, err := moduleGlobalNames([]byte(ptx))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"$str", "a", "b", "c", "counter", "konst", "table"}
	if !slices.Equal(got, want) {
		t.Fatalf("names %v, want %v", got, want)
	}
}

// An image that is neither a cubin, a fat binary nor PTX, or a broken one, is an error naming
// why, never an empty list.
func TestModuleGlobalNamesRefusesWhatItCannotRead(t *testing.T) {
	for name, image := range map[string][]byte{
		"unknown":         []byte("GPUSIM-MODULE 1\n"),
		"broken ELF":      []byte("\x7fELF\x02\x01\x01garbage"),
		"short fatbin":    fatbin(fatbinItem{kind: 1, data: []byte(".version 8.0\n")})[:40],
		"unbalanced PTX":  []byte(".version 8.0\n.global .u32 x = {1;\n"),
		"bad lz4 payload": fatbin(fatbinItem{kind: 1, data: []byte{0xf0, 1}, flags: fatbinLZ4, full: 100}),
		"container tail":  append(fatbin(fatbinItem{kind: 1, data: []byte(".version 8.0\n")}), 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16),
	} {
		if got, err := moduleGlobalNames(image); err == nil {
			t.Errorf("%s: names %v, no error", name, got)
		}
	}
}

// fatbinItem is one entry of a fat binary made by fatbin.
type fatbinItem struct {
	kind  uint16
	data  []byte // as stored (compressed, with flags)
	flags uint64
	full  uint64
}

// fatbin lays entries out as nvcc's fatbinary does: a 16-byte header, then each entry's 64-byte
// header and its payload padded to 8 bytes.
func fatbin(items ...fatbinItem) []byte {
	var body []byte
	for _, it := range items {
		padded := (len(it.data) + 7) &^ 7
		e := make([]byte, fatbinEntry)
		binary.LittleEndian.PutUint16(e, it.kind)
		binary.LittleEndian.PutUint32(e[4:], fatbinEntry)
		binary.LittleEndian.PutUint64(e[8:], uint64(padded))
		binary.LittleEndian.PutUint32(e[16:], uint32(len(it.data)))
		binary.LittleEndian.PutUint64(e[40:], it.flags)
		binary.LittleEndian.PutUint64(e[56:], it.full)
		body = append(append(body, e...), it.data...)
		body = append(body, make([]byte, padded-len(it.data))...)
	}
	h := make([]byte, fatbinHeader)
	binary.LittleEndian.PutUint32(h, fatbinMagic)
	binary.LittleEndian.PutUint16(h[4:], 1)
	binary.LittleEndian.PutUint16(h[6:], fatbinHeader)
	binary.LittleEndian.PutUint64(h[8:], uint64(len(body)))
	return append(h, body...)
}

// A fat binary's PTX entries are read plain, LZ4- or zstd-compressed; the names are their union.
func TestModuleGlobalNamesOfFatbinEntries(t *testing.T) {
	ptxA := []byte(".version 8.0\n.target sm_90\n.global .u32 alpha;\n")
	// An LZ4 block by hand: literals, a match copying ".global .u32 " (13 bytes) from what came
	// before, the last literals.
	lit := []byte(".version 8.0\n.global .u32 beta;\n")
	tail := []byte("gamma;\n")
	src := append([]byte{0xf9, byte(len(lit) - 15)}, lit...)
	src = append(src, byte(len(lit)-len(".version 8.0\n")), 0, byte(len(tail)<<4))
	src = append(src, tail...)
	lzPTX := append(append(append([]byte{}, lit...), ".global .u32 "...), tail...)
	if got, err := lz4Block(src, len(lzPTX)); err != nil || !bytes.Equal(got, lzPTX) {
		t.Fatalf("lz4: %q, %v; want %q", got, err, lzPTX)
	}
	enc, _ := zstd.NewWriter(nil)
	zPTX := []byte(".version 8.0\n.const .u32 delta = 1;\n")
	zs := enc.EncodeAll(zPTX, nil)
	image := fatbin(
		fatbinItem{kind: 1, data: ptxA},
		fatbinItem{kind: 1, data: src, flags: fatbinLZ4, full: uint64(len(lzPTX))},
		fatbinItem{kind: 1, data: zs, flags: fatbinZstd, full: uint64(len(zPTX))},
	)
	got, err := moduleGlobalNames(image)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"alpha", "beta", "delta", "gamma"}; !slices.Equal(got, want) {
		t.Fatalf("names %v, want %v", got, want)
	}
}

// Whatever bytes come, the names are found or an error says why; nothing panics.
func FuzzModuleGlobalNames(f *testing.F) {
	f.Add([]byte(ptxWithGlobals))
	f.Add(fatbin(fatbinItem{kind: 1, data: []byte(".version 8.0\n.global .u32 x;\n")}))
	f.Add(fatbin(fatbinItem{kind: 2, data: []byte{0xf0, 1, 2}, flags: fatbinLZ4, full: 20}))
	for _, b64 := range []string{nvccCubin, nvccFatbinCompressed} {
		image, _ := base64.StdEncoding.DecodeString(b64)
		f.Add(image)
	}
	f.Fuzz(func(t *testing.T, image []byte) {
		names, err := moduleGlobalNames(image)
		if err == nil && slices.ContainsFunc(names, func(n string) bool { return n == "" || strings.ContainsAny(n, " \n") }) {
			t.Fatalf("a bad name in %q", names)
		}
	})
}

// GPUCLOUD_NVCC_IMAGES, where set, holds images nvcc made from gputests/globalkernels.cu (the GPU
// machine's run of scripts/gpu-migration.sh sets it): each is read as the checkpoint reads it.
const nvccImagesEnv = "GPUCLOUD_NVCC_IMAGES"

func TestModuleGlobalNamesOfNvccImagesInDir(t *testing.T) {
	dir := os.Getenv(nvccImagesEnv)
	if dir == "" {
		t.Skip(nvccImagesEnv + " is not set")
	}
	files, err := filepath.Glob(filepath.Join(dir, "*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no images in %s: %v", dir, err)
	}
	for _, f := range files {
		image, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		names, err := moduleGlobalNames(image)
		t.Logf("%s (%d bytes): %v %v", filepath.Base(f), len(image), names, err)
		if err != nil || !slices.Contains(names, "counter") || !slices.Contains(names, "state") || !slices.Contains(names, "mult") {
			t.Errorf("%s: names %v, %v; want counter, state and mult among them", f, names, err)
		}
	}
}

// The images nvcc made of gputests/globalkernels.cu (testdata/nvccimages.sh): a cubin and a fat
// binary whose PTX and cubin are zstd-compressed name its three globals, __constant__ among them.
func TestModuleGlobalNamesOfNvccImages(t *testing.T) {
	for name, b64 := range map[string]string{"cubin": nvccCubin, "compressed fat binary": nvccFatbinCompressed} {
		image, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			t.Fatal(err)
		}
		got, err := moduleGlobalNames(image)
		if want := []string{"counter", "mult", "state"}; err != nil || !slices.Equal(got, want) {
			t.Errorf("%s: names %v, %v; want %v", name, got, err, want)
		}
		for _, cut := range []int{17, len(image) / 2, len(image) - 1} {
			if got, err := moduleGlobalNames(image[:cut]); err == nil {
				t.Errorf("%s cut at %d: names %v, no error", name, cut, got)
			}
		}
	}
}
