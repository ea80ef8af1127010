package worker

import (
	"encoding/binary"
	"fmt"

	"gpucloud/gpuserverd/backend"
	"gpucloud/gpuserverd/wire"
)

const (
	// dnnKindVariantPack is CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR.
	dnnKindVariantPack = 16
	// dnnPackMaxAttrs bounds a pack's attributes (cuDNN's variant pack has four).
	dnnPackMaxAttrs = 16
	dnnPackAttrHead = 16 // name, kind, count, byte length: four u32s
)

// decodePackAttrs splits a DnnExecutePack's attrs into the SetAttribute calls they stand for
// (Desc left 0): each a u32 name, kind, count and byte length, then the bytes. It checks the
// framing only; decodeAttr checks each attribute as it checks a SetAttribute.
func decodePackAttrs(b []byte) ([]wire.DnnSetAttribute, error) {
	var out []wire.DnnSetAttribute
	for off := 0; off < len(b); {
		if len(out) == dnnPackMaxAttrs {
			return nil, fmt.Errorf("more than %d attributes", dnnPackMaxAttrs)
		}
		if len(b)-off < dnnPackAttrHead {
			return nil, fmt.Errorf("attribute %d: %d bytes left, less than its %d-byte head", len(out), len(b)-off, dnnPackAttrHead)
		}
		a := wire.DnnSetAttribute{
			Name:  binary.LittleEndian.Uint32(b[off:]),
			Kind:  binary.LittleEndian.Uint32(b[off+4:]),
			Count: binary.LittleEndian.Uint32(b[off+8:]),
		}
		n := uint64(binary.LittleEndian.Uint32(b[off+12:]))
		off += dnnPackAttrHead
		if n > uint64(len(b)-off) {
			return nil, fmt.Errorf("attribute %d (name %d): %d bytes, %d left", len(out), a.Name, n, len(b)-off)
		}
		a.Elems = b[off : off+int(n)]
		off += int(n)
		out = append(out, a)
	}
	return out, nil
}

// encodePackAttrs is decodePackAttrs' inverse (the guest's encoding, for tests).
func encodePackAttrs(attrs []wire.DnnSetAttribute) []byte {
	var b []byte
	for _, a := range attrs {
		b = binary.LittleEndian.AppendUint32(b, a.Name)
		b = binary.LittleEndian.AppendUint32(b, a.Kind)
		b = binary.LittleEndian.AppendUint32(b, a.Count)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(a.Elems)))
		b = append(b, a.Elems...)
	}
	return b
}

// executePack runs a plan with a variant pack made, filled, finalized and destroyed here for this
// call: the guest keeps its packs to itself, so a cuDNN execution costs it no round trip. The pack
// is an id of the session only while the call lasts; each attribute is checked as a SetAttribute.
func (st *dnnState) executePack(c backend.DnnContext, m *wire.DnnExecutePack) error {
	const op = "cudnnBackendExecute"
	h, plan := backend.Handle(m.Handle), backend.Handle(m.Plan)
	if err := st.handle(h); err != nil {
		return err
	}
	if err := st.desc(plan); err != nil {
		return err
	}
	attrs, err := decodePackAttrs(m.Attrs)
	if err != nil {
		return dnnBad(op, backend.DnnBadParam, "variant pack: %v", err)
	}
	pack, err := c.DnnDescCreate(dnnKindVariantPack)
	if err != nil {
		return err
	}
	st.descs[pack] = true
	defer func() {
		delete(st.descs, pack)
		_ = c.DnnDescDestroy(pack) // after the execution is issued: cuDNN has read the pack
	}()
	for i := range attrs {
		attrs[i].Desc = uint64(pack)
		a, err := st.decodeAttr(&attrs[i])
		if err == nil {
			err = c.DnnSetAttribute(pack, a)
		}
		if err != nil {
			return fmt.Errorf("variant pack attribute %d: %w", attrs[i].Name, err)
		}
	}
	if err := c.DnnFinalize(pack); err != nil {
		return fmt.Errorf("variant pack: %w", err)
	}
	return c.DnnExecute(h, plan, pack)
}
