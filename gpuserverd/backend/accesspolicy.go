package backend

// AccessPolicyWindow is a stream's access-policy window (CUaccessPolicyWindow): how much of the
// L2 cache its kernels keep for an address range. HitProp and MissProp are CUaccessProperty
// numbers (0 normal, 1 streaming, 2 persisting).
type AccessPolicyWindow struct {
	Base, Bytes       uint64
	HitRatio          float32
	HitProp, MissProp uint32
}

// StreamAccessPolicies is a Context that applies a stream's access-policy window.
type StreamAccessPolicies interface {
	StreamSetAccessPolicy(stream Handle, w AccessPolicyWindow) error
}
