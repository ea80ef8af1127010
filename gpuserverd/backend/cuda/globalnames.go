package cuda

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/klauspost/compress/zstd"
)

// The names of a module's globals, read from the image the guest sent (issue 18). The driver
// places a cubin's or fat binary's globals (and every __constant__) itself and has no call that
// lists them, so a checkpoint finds them by name here, asks the driver where each lives
// (cuModuleGetGlobal), and carries its contents; a restore writes them wherever the new load put
// them (driverglobals.go). A cubin is an ELF whose symbol table names its globals; a fat binary
// holds cubins and PTX for several GPUs, maybe compressed (the union of their names is taken: a
// name the loaded module lacks is skipped); PTX declares them. An image this cannot read is an
// error, never an empty list: its globals' state would be lost without a word.

const (
	fatbinMagic     = 0xba55ed50
	fatbinHeader    = 16
	fatbinEntry     = 64
	fatbinPTX       = 1
	fatbinELF       = 2
	fatbinELF2      = 0x10   // a cubin too, as cuobjdump counts them
	fatbinLZ4       = 0x2000 // an entry's flag: its payload is an LZ4 block
	fatbinZstd      = 0x8000 // an entry's flag: its payload is a zstd frame
	maxGlobalsImage = 1 << 30
)

// moduleGlobalNames is the names of the globals an image defines, sorted.
func moduleGlobalNames(image []byte) ([]string, error) {
	names := map[string]bool{}
	if err := addGlobalNames(names, image); err != nil {
		return nil, err
	}
	return slices.Sorted(maps.Keys(names)), nil
}

func addGlobalNames(names map[string]bool, image []byte) error {
	switch {
	case bytes.HasPrefix(image, []byte(elf.ELFMAG)):
		return elfGlobalNames(names, image)
	case len(image) >= 4 && binary.LittleEndian.Uint32(image) == fatbinMagic:
		return fatbinGlobalNames(names, image)
	case isPTX(image):
		return ptxGlobalNames(names, ptxText(image))
	}
	return errors.New("the image is neither a cubin (ELF), a fat binary nor PTX text")
}

// elfGlobalNames adds a cubin's data objects in its global and constant sections (.nv.global,
// .nv.global.init, .nv.constant<bank>; not .nv.constant0.<kernel>, a kernel's parameters).
func elfGlobalNames(names map[string]bool, image []byte) error {
	f, err := elf.NewFile(bytes.NewReader(image))
	if err != nil {
		return fmt.Errorf("the cubin: %w", err)
	}
	syms, err := f.Symbols()
	if errors.Is(err, elf.ErrNoSymbols) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("the cubin's symbol table: %w", err)
	}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) != elf.STT_OBJECT || s.Name == "" || s.Section == elf.SHN_UNDEF ||
			s.Section >= elf.SHN_LORESERVE || int(s.Section) >= len(f.Sections) {
			continue
		}
		sec := f.Sections[s.Section].Name
		if strings.HasPrefix(sec, ".nv.global") || strings.HasPrefix(sec, ".nv.constant") && !strings.HasPrefix(sec, ".nv.constant0") {
			names[s.Name] = true
		}
	}
	return nil
}

// fatbinGlobalNames adds the names of every cubin and PTX text in a fat binary (one container or
// several after each other).
func fatbinGlobalNames(names map[string]bool, image []byte) error {
	for at := 0; at+fatbinHeader <= len(image); {
		c := image[at:]
		if binary.LittleEndian.Uint32(c) != fatbinMagic {
			if len(bytes.Trim(c, "\x00")) == 0 {
				return nil // padding after the last container
			}
			return fmt.Errorf("the fat binary: no container at byte %d", at)
		}
		hdr, size := uint64(binary.LittleEndian.Uint16(c[6:])), binary.LittleEndian.Uint64(c[8:])
		if hdr < fatbinHeader || size > uint64(len(c)) || hdr+size > uint64(len(c)) {
			return fmt.Errorf("the fat binary: a container at byte %d of %d bytes past its end", at, hdr+size)
		}
		if err := fatbinEntries(names, c[hdr:hdr+size]); err != nil {
			return fmt.Errorf("the fat binary's container at byte %d: %w", at, err)
		}
		at += int(hdr + size)
	}
	return nil
}

// fatbinEntries adds the names of a container's entries: a header (kind, its own size, the
// payload's padded size, its stored size, flags, its size uncompressed), then the payload.
func fatbinEntries(names map[string]bool, body []byte) error {
	read := 0
	for at := 0; at < len(body); {
		e := body[at:]
		if len(e) < fatbinEntry {
			return fmt.Errorf("an entry at byte %d cut short", at)
		}
		kind, hdr := binary.LittleEndian.Uint16(e), uint64(binary.LittleEndian.Uint32(e[4:]))
		padded, stored := binary.LittleEndian.Uint64(e[8:]), uint64(binary.LittleEndian.Uint32(e[16:]))
		flags, full := binary.LittleEndian.Uint64(e[40:]), binary.LittleEndian.Uint64(e[56:])
		if hdr < fatbinEntry || hdr > uint64(len(e)) || padded > uint64(len(e))-hdr {
			return fmt.Errorf("the entry at byte %d runs past the container", at)
		}
		payload := e[hdr : hdr+padded]
		if flags&(fatbinLZ4|fatbinZstd) != 0 && (kind == fatbinPTX || kind == fatbinELF || kind == fatbinELF2) {
			if stored == 0 || stored > padded || full > maxGlobalsImage {
				return fmt.Errorf("the compressed entry at byte %d: %d bytes stored of %d, %d uncompressed", at, stored, padded, full)
			}
			var err error
			if payload, err = decompressEntry(payload[:stored], flags, full); err != nil {
				return fmt.Errorf("the entry at byte %d: %w", at, err)
			}
		}
		switch kind {
		case fatbinPTX:
			if err := ptxGlobalNames(names, bytes.TrimRight(payload, "\x00")); err != nil {
				return fmt.Errorf("the PTX entry at byte %d: %w", at, err)
			}
			read++
		case fatbinELF, fatbinELF2:
			if err := elfGlobalNames(names, payload); err != nil {
				return fmt.Errorf("the cubin entry at byte %d: %w", at, err)
			}
			read++
		}
		// Other kinds (LTO IR) are the same source as the PTX or cubin beside them.
		at += int(hdr + padded)
	}
	if read == 0 && len(body) > 0 {
		return errors.New("no PTX or cubin entry in it")
	}
	return nil
}

// decompressEntry is a compressed entry's payload, full bytes long.
func decompressEntry(b []byte, flags, full uint64) ([]byte, error) {
	if flags&fatbinZstd != 0 || bytes.HasPrefix(b, []byte{0x28, 0xb5, 0x2f, 0xfd}) {
		// The bound is the entry's size, not less than a frame's usual window.
		d, err := zstd.NewReader(nil, zstd.WithDecoderMaxMemory(max(full, 8<<20)), zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, err
		}
		defer d.Close()
		out, err := d.DecodeAll(b, make([]byte, 0, full))
		if err != nil {
			return nil, fmt.Errorf("zstd: %w", err)
		}
		if uint64(len(out)) != full {
			return nil, fmt.Errorf("zstd: %d bytes decoded, the entry says %d", len(out), full)
		}
		return out, nil
	}
	return lz4Block(b, int(full))
}

// lz4Block decodes one LZ4 block (the format NVIDIA's fatbinary compresses entries with by
// default) of n bytes: sequences of literals and a match (offset, length) into what came before.
func lz4Block(src []byte, n int) ([]byte, error) {
	dst := make([]byte, 0, n)
	length := func(i *int, v int) (int, error) {
		if v < 15 {
			return v, nil
		}
		for {
			if *i >= len(src) {
				return 0, errors.New("lz4: a length runs past the block")
			}
			b := src[*i]
			*i++
			v += int(b)
			if b != 255 {
				return v, nil
			}
		}
	}
	for i := 0; i < len(src); {
		tok := src[i]
		i++
		lit, err := length(&i, int(tok>>4))
		if err != nil {
			return nil, err
		}
		if lit > len(src)-i || lit > n-len(dst) {
			return nil, errors.New("lz4: literals past the block or its size")
		}
		dst = append(dst, src[i:i+lit]...)
		if i += lit; i == len(src) {
			break // the last sequence has no match
		}
		if i+2 > len(src) {
			return nil, errors.New("lz4: a match offset cut short")
		}
		off := int(src[i]) | int(src[i+1])<<8
		i += 2
		ml, err := length(&i, int(tok&15))
		if err != nil {
			return nil, err
		}
		ml += 4
		if off == 0 || off > len(dst) || ml > n-len(dst) {
			return nil, fmt.Errorf("lz4: a match at offset %d of %d bytes out of range", off, ml)
		}
		for k := 0; k < ml; k++ {
			dst = append(dst, dst[len(dst)-off])
		}
	}
	if len(dst) != n {
		return nil, fmt.Errorf("lz4: %d bytes decoded, the entry says %d", len(dst), n)
	}
	return dst, nil
}

// ptxGlobalNames adds the variables PTX defines at module scope in the global and constant
// state spaces (.extern declarations are defined elsewhere; texture references hold no data).
func ptxGlobalNames(names map[string]bool, ptx []byte) error {
	return ptxStatements(ptx, func(start, end int) error {
		decl, _, _ := strings.Cut(string(ptx[start:end-1]), "=")
		toks := strings.Fields(decl)
		if !hasToken(toks, ".global") && !hasToken(toks, ".const") || hasToken(toks, ".extern") {
			return nil
		}
		for _, bad := range ptxNoPin {
			if strings.Contains(decl, bad) {
				return nil
			}
		}
		for i, part := range strings.Split(decl, ",") {
			var name string
			if i == 0 {
				name = declaredName(strings.Fields(part))
			} else {
				name = ptxIdent.FindString(strings.TrimSpace(part))
			}
			if name == "" {
				return fmt.Errorf("a .global or .const statement without a name at byte %d", start)
			}
			names[name] = true
		}
		return nil
	}, nil)
}
