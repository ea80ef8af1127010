package backend

import (
	"encoding/binary"
	"fmt"
)

// LtKind is which cuBLASLt object an attribute list describes.
type LtKind uint32

const (
	LtMatmulDesc   LtKind = 0 // cublasLtMatmulDesc_t
	LtMatrixLayout LtKind = 1 // cublasLtMatrixLayout_t
	LtPreference   LtKind = 2 // cublasLtMatmulPreference_t
)

func (k LtKind) String() string {
	switch k {
	case LtMatmulDesc:
		return "matmul descriptor"
	case LtMatrixLayout:
		return "matrix layout"
	case LtPreference:
		return "matmul preference"
	}
	return fmt.Sprintf("cuBLASLt object kind %d", uint32(k))
}

// Attribute numbers of cublasLt.h the worker reads itself.
const (
	LtDescCompute     uint32 = 0  // CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, int32
	LtDescScale       uint32 = 1  // CUBLASLT_MATMUL_DESC_SCALE_TYPE, int32
	LtDescPointerMode uint32 = 2  // CUBLASLT_MATMUL_DESC_POINTER_MODE, int32
	LtDescTransA      uint32 = 3  // int32
	LtDescTransB      uint32 = 4  // int32
	LtDescEpilogue    uint32 = 7  // uint32
	LtDescBias        uint32 = 8  // device pointer
	LtDescBiasType    uint32 = 26 // int32, -1: D's type
	// CUBLASLT_MATMUL_DESC_EMULATION_DESCRIPTOR holds a host object of the program's process: it
	// cannot cross to the worker.
	ltDescEmulation uint32 = 38

	LtLayoutType        uint32 = 0 // uint32 (cudaDataType_t)
	LtLayoutOrder       uint32 = 1 // int32, 0: column-major
	LtLayoutRows        uint32 = 2 // uint64
	LtLayoutCols        uint32 = 3 // uint64
	LtLayoutLd          uint32 = 4 // int64
	LtLayoutBatch       uint32 = 5 // int32
	LtLayoutBatchStride uint32 = 6 // int64 (elements)
)

// Epilogues (cublasLtEpilogue_t).
const (
	LtEpilogueDefault  uint32 = 1
	LtEpilogueReLU     uint32 = 2
	LtEpilogueBias     uint32 = 4
	LtEpilogueReLUBias uint32 = 6
	LtEpilogueGELU     uint32 = 32
	LtEpilogueGELUBias uint32 = 36
)

// ltAttrSizes are the value sizes of every attribute cublasLt.h (CUDA 13) defines, by kind; an
// attribute not listed is refused.
var ltAttrSizes = [3]map[uint32]int{
	LtMatmulDesc: {
		0: 4, 1: 4, 2: 4, 3: 4, 4: 4, 5: 4, 6: 4, 7: 4, 8: 8, 10: 8, 11: 8, 12: 8, 13: 8, 14: 8, 15: 4,
		17: 8, 18: 8, 19: 8, 20: 8, 21: 8, 22: 4, 23: 8, 24: 8, 25: 1, 26: 4, 31: 4, 32: 4, 33: 4,
		34: 4, 35: 4, 36: 8, 37: 4,
	},
	LtMatrixLayout: {0: 4, 1: 4, 2: 8, 3: 8, 4: 8, 5: 4, 6: 8, 7: 8, 8: 4},
	LtPreference:   {0: 4, 1: 8, 3: 4, 5: 4, 6: 4, 7: 4, 8: 4, 9: 4, 12: 8},
}

// ltRequired are the attributes an object's create call takes (cublasLtMatmulDescCreate's
// compute and scale types, cublasLtMatrixLayoutCreate's type, rows, cols and ld).
var ltRequired = [3][]uint32{
	LtMatmulDesc:   {LtDescCompute, LtDescScale},
	LtMatrixLayout: {LtLayoutType, LtLayoutRows, LtLayoutCols, LtLayoutLd},
}

// LtCreateArg reports whether attribute id of kind k is an argument of the object's create call
// (so it is given there, not set afterwards).
func LtCreateArg(k LtKind, id uint32) bool {
	if k > LtPreference {
		return false
	}
	for _, r := range ltRequired[k] {
		if r == id {
			return true
		}
	}
	return false
}

// LtAttrSize is the size of attribute id's value in an object of kind k; false for one
// cuBLASLt does not have or gpucloud cannot carry (a host object's address).
func LtAttrSize(k LtKind, id uint32) (int, bool) {
	if k > LtPreference || (k == LtMatmulDesc && id == ltDescEmulation) {
		return 0, false
	}
	n, ok := ltAttrSizes[k][id]
	return n, ok
}

// LtAttr is one attribute's value, little-endian as cuBLASLt holds it.
type LtAttr struct {
	ID    uint32
	Value []byte
}

// LtObject is a cuBLASLt object as its attribute list: what the guest set, each attribute once.
type LtObject struct {
	Kind  LtKind
	Attrs []LtAttr
}

// MaxLtAttrs bounds an object's attribute list (each attribute appears once; cublasLt.h has 35).
const MaxLtAttrs = 64

func ltBad(k LtKind, f string, a ...any) error {
	return &BlasError{Op: "cuBLASLt " + k.String(), Status: BlasInvalidValue, Detail: fmt.Sprintf(f, a...)}
}

// ParseLtObject decodes b ("u32 count", then count entries "u32 attribute, u32 length, value")
// and checks every attribute is one of kind k's, with its size, once, and that the create
// call's attributes are there.
func ParseLtObject(k LtKind, b []byte) (LtObject, error) {
	o := LtObject{Kind: k}
	if k > LtPreference {
		return o, ltBad(k, "unknown kind")
	}
	if len(b) < 4 {
		return o, ltBad(k, "%d bytes: no attribute count", len(b))
	}
	n := binary.LittleEndian.Uint32(b)
	if n > MaxLtAttrs {
		return o, ltBad(k, "%d attributes (at most %d)", n, MaxLtAttrs)
	}
	b = b[4:]
	seen := map[uint32]bool{}
	for i := uint32(0); i < n; i++ {
		if len(b) < 8 {
			return o, ltBad(k, "attribute %d of %d: truncated", i, n)
		}
		id, size := binary.LittleEndian.Uint32(b), binary.LittleEndian.Uint32(b[4:])
		want, ok := LtAttrSize(k, id)
		if !ok {
			return o, ltBad(k, "attribute %d: not one gpucloud carries", id)
		}
		if int(size) != want {
			return o, ltBad(k, "attribute %d: %d bytes, want %d", id, size, want)
		}
		if len(b)-8 < want {
			return o, ltBad(k, "attribute %d: truncated value", id)
		}
		if seen[id] {
			return o, ltBad(k, "attribute %d twice", id)
		}
		seen[id] = true
		o.Attrs = append(o.Attrs, LtAttr{ID: id, Value: append([]byte(nil), b[8:8+want]...)})
		b = b[8+want:]
	}
	if len(b) != 0 {
		return o, ltBad(k, "%d bytes after the attributes", len(b))
	}
	for _, id := range ltRequired[k] {
		if !seen[id] {
			return o, ltBad(k, "attribute %d (a create argument) missing", id)
		}
	}
	return o, nil
}

// Encode is the attribute list in ParseLtObject's format.
func (o LtObject) Encode() []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(o.Attrs)))
	for _, a := range o.Attrs {
		b = binary.LittleEndian.AppendUint32(b, a.ID)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(a.Value)))
		b = append(b, a.Value...)
	}
	return b
}

// Get is attribute id's value; false when it was not set.
func (o LtObject) Get(id uint32) ([]byte, bool) {
	for _, a := range o.Attrs {
		if a.ID == id {
			return a.Value, true
		}
	}
	return nil, false
}

// Int is attribute id as an integer of its size (signed for 4- and 8-byte ones), def when unset.
func (o LtObject) Int(id uint32, def int64) int64 {
	v, ok := o.Get(id)
	if !ok {
		return def
	}
	switch len(v) {
	case 1:
		return int64(int8(v[0]))
	case 4:
		return int64(int32(binary.LittleEndian.Uint32(v)))
	case 8:
		return int64(binary.LittleEndian.Uint64(v))
	}
	return def
}

// Uint is attribute id as an unsigned integer (uint64 rows and cols, pointers), def when unset.
func (o LtObject) Uint(id uint32, def uint64) uint64 {
	v, ok := o.Get(id)
	if !ok {
		return def
	}
	switch len(v) {
	case 4:
		return uint64(binary.LittleEndian.Uint32(v))
	case 8:
		return binary.LittleEndian.Uint64(v)
	}
	return def
}

// Pointer modes (cublasLtPointerMode_t): where alpha and beta are.
const (
	LtPointerHost                = 0
	LtPointerDevice              = 1
	LtPointerDeviceVector        = 2
	LtPointerAlphaVectorBetaZero = 3
	LtPointerAlphaVectorBetaHost = 4
)

// LtScalarPlaces says, for a descriptor's pointer mode, whether alpha and beta are device
// addresses, and whether beta is read at all; false ok for a mode cuBLASLt does not have.
func LtScalarPlaces(mode int64) (alphaDev, betaDev, betaUsed, ok bool) {
	switch mode {
	case LtPointerHost:
		return false, false, true, true
	case LtPointerDevice, LtPointerDeviceVector:
		return true, true, true, true
	case LtPointerAlphaVectorBetaZero:
		return true, false, false, true
	case LtPointerAlphaVectorBetaHost:
		return true, false, true, true
	}
	return false, false, false, false
}

// LtResult is one heuristic result (cublasLtMatmulHeuristicResult_t): Algo is cuBLASLt's opaque
// algorithm, passed back verbatim in LtMatmul.
type LtResult struct {
	Algo      [8]uint64
	Workspace uint64
	State     BlasStatus
	Waves     float32
}

// MaxLtResults is the most heuristic results one query returns over the wire.
const MaxLtResults = 4

// LtQuery is cublasLtMatmulAlgoGetHeuristic.
type LtQuery struct {
	Handle     Handle
	Desc       LtObject
	A, B, C, D LtObject
	Pref       LtObject
	Requested  int
}

// LtMatmul is cublasLtMatmul. Alpha and Beta are the scalars' bytes, or 8-byte device
// addresses where the descriptor's pointer mode says so (LtScalarPlaces); Algo nil lets
// cuBLASLt choose.
type LtMatmul struct {
	Handle                     Handle
	Desc                       LtObject
	Alpha, Beta                []byte
	A, B, C, D                 uint64
	ADesc, BDesc, CDesc, DDesc LtObject
	Algo                       *[8]uint64
	Workspace, WorkspaceSize   uint64
	Stream                     Handle
}

// Validate checks the scalars against the descriptor's pointer mode and scale type.
func (m *LtMatmul) Validate() error {
	mode := m.Desc.Int(LtDescPointerMode, LtPointerHost)
	alphaDev, betaDev, betaUsed, ok := LtScalarPlaces(mode)
	if !ok {
		return ltBad(LtMatmulDesc, "pointer mode %d", mode)
	}
	scale := uint32(m.Desc.Int(LtDescScale, 0))
	size, ok := ScaleSize(scale)
	if !ok {
		return ltBad(LtMatmulDesc, "scale type %d", scale)
	}
	check := func(name string, v []byte, dev, used bool) error {
		want := size
		if dev {
			want = 8
		}
		if !used {
			want = 0
		}
		if uint64(len(v)) != want {
			return &BlasError{Op: "cublasLtMatmul", Status: BlasInvalidValue,
				Detail: fmt.Sprintf("%s: %d bytes, want %d (pointer mode %d, scale type %d)", name, len(v), want, mode, scale)}
		}
		return nil
	}
	if err := check("alpha", m.Alpha, alphaDev, true); err != nil {
		return err
	}
	return check("beta", m.Beta, betaDev, betaUsed)
}

// ScaleSize is the size of a scalar of type t, complex types included; false for a type no
// scalar has.
func ScaleSize(t uint32) (uint64, bool) {
	switch t {
	case 4: // CUDA_C_32F
		return 8, true
	case 5: // CUDA_C_64F
		return 16, true
	}
	return DataSize(t)
}
