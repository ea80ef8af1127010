package backend

// ManagedGlobals is a Context that tells a module's managed variables (__managed__ in CUDA C++,
// .attribute(.managed) in PTX) from its other globals: a managed variable's address is one the
// program's host code dereferences too, which the guest must arrange.
type ManagedGlobals interface {
	IsManaged(ptr uint64) (bool, error)
}
