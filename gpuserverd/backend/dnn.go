package backend

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// DnnStatus is a cuDNN status code (cudnnStatus_t); DnnSuccess is 0.
type DnnStatus int32

// The cuDNN codes gpuserverd produces or passes through (cudnn_graph.h).
const (
	DnnSuccess           DnnStatus = 0
	DnnNotInitialized    DnnStatus = 1001
	DnnBadParam          DnnStatus = 2000
	DnnBadParamNull      DnnStatus = 2002
	DnnBadParamFinalized DnnStatus = 2004 // CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED
	DnnBadParamType      DnnStatus = 2010 // CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE
	DnnBadParamDescType  DnnStatus = 2012
	DnnNotSupported      DnnStatus = 3000
	DnnInternalError     DnnStatus = 4000
	DnnAllocFailed       DnnStatus = 4004 // CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED
	DnnExecutionFailed   DnnStatus = 5000
)

// DnnError is a failed cuDNN call. It unwraps to the CUDA code the failure stands for, so an
// error of an execution sent without waiting surfaces at the next synchronising call.
type DnnError struct {
	Op     string
	Status DnnStatus
	Detail string
}

func (e *DnnError) Error() string {
	if e.Detail != "" {
		return fmt.Sprintf("cudnn: %s: status %d: %s", e.Op, int32(e.Status), e.Detail)
	}
	return fmt.Sprintf("cudnn: %s: status %d", e.Op, int32(e.Status))
}

// Unwrap gives the CUDA code by the status's class (cuDNN 9 groups codes by thousands).
func (e *DnnError) Unwrap() error {
	switch e.Status / 1000 {
	case 1:
		return ErrInvalidHandle
	case 2:
		return ErrInvalidValue
	case 3:
		return ErrNotSupported
	}
	if e.Status == DnnAllocFailed {
		return ErrOutOfMemory
	}
	return ErrLaunchFailed
}

// DnnStatusOf is the cuDNN status of err: a DnnError's own; for a CUDA error (a bad stream, a
// dead context) the status cuDNN gives such failures.
func DnnStatusOf(err error) DnnStatus {
	if err == nil {
		return DnnSuccess
	}
	var de *DnnError
	if errors.As(err, &de) {
		return de.Status
	}
	switch ResultOf(err) {
	case ErrInvalidHandle:
		return DnnNotInitialized
	case ErrInvalidValue:
		return DnnBadParam
	case ErrOutOfMemory:
		return DnnAllocFailed
	case ErrNotSupported:
		return DnnNotSupported
	}
	return DnnInternalError
}

// Attribute element types (cudnnBackendAttributeType_t) that need more than their bytes.
const (
	DnnTypeHandle     uint32 = 0
	DnnTypeBoolean    uint32 = 2
	DnnTypeInt64      uint32 = 3
	DnnTypeDouble     uint32 = 5
	DnnTypeVoidPtr    uint32 = 6
	DnnTypeDescriptor uint32 = 15
	DnnTypeInt32      uint32 = 23
	DnnTypeChar       uint32 = 24
	DnnTypeFraction   uint32 = 26
	dnnTypeLast       uint32 = 30 // CUDNN_TYPE_MOE_GROUPED_MATMUL_MODE

	// DnnTypeHostValues is gpucloud's own element type, not cuDNN's: a variant pack's data
	// pointers where some name host scalars passed by value (CUDNN_ATTR_TENSOR_IS_BY_VALUE: an
	// attention's scale), which the worker cannot read in the guest's memory. Each element is
	// 16 bytes: a u64 length (0: the next u64 is a device address; 1-8: the next u64 holds that
	// many bytes of the value), then that u64. The backend hands cuDNN VOID_PTR elements, the
	// by-value ones pointing at its own copy of the value.
	DnnTypeHostValues uint32 = 0x6763
	// DnnHostValueMax is the most bytes one by-value element carries.
	DnnHostValueMax = 8
)

// DnnElemSize is the size of one element of attribute type t as it travels (ids and addresses
// as u64); false for a type cuDNN 9 does not have.
func DnnElemSize(t uint32) (int, bool) {
	switch t {
	case DnnTypeHandle, DnnTypeInt64, DnnTypeDouble, DnnTypeVoidPtr, DnnTypeDescriptor:
		return 8, true
	case DnnTypeBoolean, DnnTypeChar:
		return 1, true
	case DnnTypeFraction:
		return 16, true // two int64s
	case DnnTypeHostValues:
		return 16, true
	}
	if t <= dnnTypeLast {
		return 4, true // float, int32 and the enumerations
	}
	return 0, false
}

// DnnMaxElems bounds one attribute's elements (a descriptor array, a JSON string).
const DnnMaxElems = 1 << 16

// DnnAttr is one attribute's value as a backend takes it: Count elements of Type in Elems,
// descriptor and handle elements already checked to be the session's (ids of this context).
type DnnAttr struct {
	Name, Type uint32
	Count      int
	Elems      []byte
}

// IDs are the u64 elements of a descriptor- or handle-typed attribute.
func (a *DnnAttr) IDs() []Handle {
	ids := make([]Handle, a.Count)
	for i := range ids {
		ids[i] = Handle(binary.LittleEndian.Uint64(a.Elems[i*8:]))
	}
	return ids
}

// Legacy-API calls (DnnLegacy.Op) and their descriptors and argument words.
const (
	DnnOpConvForward        uint32 = 1  // x w conv y | algo x w ws wsBytes y alpha beta
	DnnOpConvBackwardData   uint32 = 2  // w dy conv dx | algo w dy ws wsBytes dx alpha beta
	DnnOpConvBackwardFilter uint32 = 3  // x dy conv dw | algo x dy ws wsBytes dw alpha beta
	DnnOpConvForwardAlgos   uint32 = 4  // x w conv y | requested
	DnnOpConvBwdDataAlgos   uint32 = 5  // w dy conv dx | requested
	DnnOpConvBwdFilterAlgos uint32 = 6  // x dy conv dw | requested
	DnnOpConvForwardWs      uint32 = 7  // x w conv y | algo
	DnnOpConvBwdDataWs      uint32 = 8  // w dy conv dx | algo
	DnnOpConvBwdFilterWs    uint32 = 9  // x dy conv dw | algo
	DnnOpPoolingForward     uint32 = 10 // pool x y | alpha x beta y
	DnnOpDropoutStatesSize  uint32 = 11 // | (none)
	DnnOpBatchNormInference uint32 = 12 // x y bn | mode alpha beta x y scale bias mean var eps
	DnnOpBatchNormTrainWs   uint32 = 13 // x z y bn act | mode bnOps
	DnnOpBatchNormReserve   uint32 = 14 // act x | mode bnOps
	DnnOpBatchNormTrain     uint32 = 15 // x z y bn act | mode bnOps alpha beta x z y scale bias factor runMean runVar eps saveMean saveInvVar ws wsBytes reserve reserveBytes
	DnnOpBatchNormBwdWs     uint32 = 16 // x y dy dz dx bn act | mode bnOps
	DnnOpBatchNormBackward  uint32 = 17 // x y dy dz dx bn act | mode bnOps alphaD betaD alphaP betaP x y dy dz dx scale bias dscale dbias eps saveMean saveInvVar ws wsBytes reserve reserveBytes
)

// Legacy descriptor kinds (word 0 of a DnnDesc).
const (
	DnnDescTensor     int32 = 1
	DnnDescFilter     int32 = 2
	DnnDescConv       int32 = 3
	DnnDescPooling    int32 = 4
	DnnDescActivation int32 = 5
)

// DnnDescSize is a legacy descriptor's size on the wire: 32 int32 words.
const DnnDescSize = 128

// DnnDesc is a legacy descriptor as the guest library keeps it (the guest's cudnnTensorStruct
// and friends, guest/cudnn/cudnn.c): word 0 its kind, then by kind
//
//	tensor:     1 dtype, 2 nbDims, 3-10 dims, 11-18 strides
//	filter:     1 dtype, 2 format, 3 nbDims, 4-11 dims
//	conv:       1 nbSpatial, 2-7 pads, 8-13 strides, 14-19 dilations, 20 mode, 21 computeType, 22 groups, 23 mathType
//	pooling:    1 mode, 2 nanProp, 3 nbDims, 4-9 window, 10-15 pads, 16-21 strides
//	activation: 1 mode, 2 nanProp, 3-4 coef (float64 bits)
type DnnDesc [32]int32

// Kind is the descriptor's kind.
func (d *DnnDesc) Kind() int32 { return d[0] }

// Dims are a tensor's or filter's dimensions (nil when nbDims is out of range).
func (d *DnnDesc) Dims() []int32 {
	switch d[0] {
	case DnnDescTensor:
		if d[2] >= 1 && d[2] <= 8 {
			return d[3 : 3+d[2]]
		}
	case DnnDescFilter:
		if d[3] >= 1 && d[3] <= 8 {
			return d[4 : 4+d[3]]
		}
	}
	return nil
}

// Strides are a tensor's strides (nil for anything else).
func (d *DnnDesc) Strides() []int32 {
	if d[0] == DnnDescTensor && d[2] >= 1 && d[2] <= 8 {
		return d[11 : 11+d[2]]
	}
	return nil
}

// DnnLegacyCall is one legacy call: its descriptors and argument words.
type DnnLegacyCall struct {
	Op     uint32
	Handle Handle
	Descs  []DnnDesc
	Args   []uint64
}

// DnnLegacyResult is what a legacy call answers: a number (a size, a count) and up to 16 words
// of data (algorithm results).
type DnnLegacyResult struct {
	Value uint64
	Data  [16]uint64
}

// DnnContext is a Context that serves cuDNN. Descriptor and handle ids are this context's; a
// backend keeps NVIDIA's real objects behind them.
type DnnContext interface {
	DnnCreate() (Handle, error)
	DnnDestroy(h Handle) error
	DnnSetStream(h, stream Handle) error
	DnnDescCreate(typ uint32) (Handle, error)
	DnnDescDestroy(d Handle) error
	DnnSetAttribute(d Handle, a DnnAttr) error
	// DnnGetAttribute reads up to requested elements; for a descriptor type, in holds the ids
	// of the descriptors cuDNN fills in. It returns the attribute's count and the elements read.
	DnnGetAttribute(d Handle, name, typ uint32, requested int, in []Handle) (int, []byte, error)
	DnnFinalize(d Handle) error
	// DnnExecute runs a plan with a variant pack on the handle's stream, like a kernel launch.
	DnnExecute(h, plan, pack Handle) error
	DnnLegacy(call DnnLegacyCall) (DnnLegacyResult, error)
}
