package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// The committed description and annotations classify cuSOLVER's parameters as the dense API
// means them: handles and objects by id, values, device addresses by default, host outputs,
// arrays and scratch named in cusolver.ann, and host objects and callbacks refused.
func TestSolverClassification(t *testing.T) {
	d, err := readDesc(filepath.Join("desc", "cusolverdn.txt"))
	if err != nil {
		t.Fatal(err)
	}
	ann, err := readSolverAnn(filepath.Join("desc", "cusolver.ann"))
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]solverVerdict{}
	for _, v := range solverDecide(d, ann) {
		byName[v.f.name] = v
	}
	kinds := func(v solverVerdict) string {
		var k []string
		for _, a := range v.args {
			k = append(k, strings.TrimPrefix(a.kind, "Solver"))
		}
		return strings.Join(k, " ")
	}
	for _, c := range []struct {
		name, kinds string
		async       bool
	}{
		{"cusolverDnCreate", "New", false},
		{"cusolverDnSetStream", "Object Stream", true},
		{"cusolverDnDgetrf_bufferSize", "Object Value Value Device Value Out", false},
		{"cusolverDnDgetrf", "Object Value Value Device Value Device Device Device", true},
		{"cusolverDnXsyevjSetTolerance", "Object Double", true},
		{"cusolverDnSsyevdx", "Object Value Value Value Value Device Value Float Float Value Value Out Device Device Value Device", false},
		{"cusolverDnXpotrf", "Object Object Value Value Value Device Value Value Device Value HostWork Value Device", true},
		{"cusolverDnSpotrfBatched", "Object Value Value Device Value Device Value", true},
		{"cusolverDnSgesvdaStridedBatched", "Object Value Value Value Value Device Value Value Device Value Device Value Value Device Value Value Device Value Device OutArray Value", false},
		{"cusolverDnDestroy", "Object", false},
	} {
		v, ok := byName[c.name]
		if !ok || !v.remote {
			t.Errorf("%s: not remoted (%s)", c.name, v.reason)
			continue
		}
		if got := kinds(v); got != c.kinds || v.async != c.async {
			t.Errorf("%s: %s (async %v), want %s (async %v)", c.name, got, v.async, c.kinds, c.async)
		}
	}
	if v := byName["cusolverDnXpotrf"]; v.args[10].ref != 11 {
		t.Errorf("Xpotrf's host scratch sized by parameter %d, want 11 (workspaceInBytesOnHost)", v.args[10].ref)
	}
	// NULL params is NVIDIA's default algorithms where params only tunes a computation (PyTorch
	// passes NULL to Xgeqrf_bufferSize and Xsyevd_bufferSize); a NULL handle, or NULL params as
	// what a function works on, is refused.
	for _, c := range []struct {
		name     string
		param    int
		nullable bool
	}{
		{"cusolverDnXgeqrf_bufferSize", 1, true}, {"cusolverDnXsyevd_bufferSize", 1, true}, {"cusolverDnXgeqrf", 1, true},
		{"cusolverDnXgeqrf_bufferSize", 0, false}, {"cusolverDnSetAdvOptions", 0, false}, {"cusolverDnDestroyParams", 0, false},
		{"cusolverDnXsyevjSetTolerance", 0, false},
	} {
		if a := byName[c.name].args[c.param]; a.nullable != c.nullable {
			t.Errorf("%s parameter %s: nullable %v, want %v", c.name, a.p.name, a.nullable, c.nullable)
		}
	}
	for _, name := range []string{"cusolverDnIRSParamsCreate", "cusolverDnLoggerSetCallback", "cusolverDnLoggerSetFile", "cusolverDnXsyevdx"} {
		if v := byName[name]; v.remote || v.reason == "" {
			t.Errorf("%s: remote %v, reason %q; want refused with a reason", name, v.remote, v.reason)
		}
	}
	if v := byName["cusolverDnGetStream"]; !v.hand || v.remote {
		t.Errorf("cusolverDnGetStream: hand %v remote %v; want answered in the guest", v.hand, v.remote)
	}
}
