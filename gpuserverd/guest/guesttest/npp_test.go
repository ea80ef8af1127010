package guesttest

import (
	"os"
	"path/filepath"
	"testing"
)

// nppLibs are NVIDIA's NPP libraries (their sonames' stems), each a guest library of
// gpuserverd/guest/npp with the functions of apigen/desc/<stem>.txt.
var nppLibs = []string{"nppc", "nppial", "nppicc", "nppidei", "nppif", "nppig", "nppim", "nppist", "nppisu", "nppitc", "npps"}

var nppBuild buildOnce

// buildNpp builds gpucloud's NPP libraries and npp_sim_test (no NVIDIA header).
func buildNpp(t *testing.T) string {
	t.Helper()
	buildCublas(t) // the foreign libcuda.so.1
	return nppBuild.do(t, func(dir string) error {
		link := []string{"-L" + dir}
		for _, l := range []string{"nppc", "nppisu", "nppial", "nppidei", "nppif", "nppist", "npps"} {
			link = append(link, "-l:lib"+l+".so.13")
		}
		return runSteps([][]string{
			{"make", "-s", "-j2", "-C", "../npp", "BUILD=" + dir, "LIBDIRS=-L" + dir, "CFLAGS=-O2 -Wall -Wextra -Werror"},
			append(append([]string{"gcc", "-Wall", "-Wextra", "-Werror", "-I../include", "-o", filepath.Join(dir, "npp_sim_test"),
				"../npp/npp_sim_test.c"}, link...), "-lcuda"),
		})
	})
}

// TestNppOnSim runs npp_sim_test over gpucloud's NPP libraries and a real gpuserverd on the
// simulated backend: images set, added and box-filtered on the program's stream and checked on
// the CPU, host outputs and a staged host array, a foreign stream refused; a function that is not
// remoted, called twice, is named on stderr once.
func TestNppOnSim(t *testing.T) {
	buildNpp(t)
	noticedOnce(t, runOK(t, startServer(t), "npp_sim_test"), "libnpp", "nppiFloodFill_8u_C1IR_Ctx")
}

// TestNppRefusesForeignDriver: over a libcuda.so.1 that is not gpucloud's, NPP's first call fails
// and says why.
func TestNppRefusesForeignDriver(t *testing.T) {
	refusesForeignDriver(t, buildNpp(t), "npp_sim_test", "s-foreign-npp")
}

// TestNppExportsItsHeaders: each NPP library exports, under NVIDIA's version node (its soname),
// every function of its headers (apigen/desc/<lib>.txt, extracted from NVIDIA's, the allocators and
// the version among them), and nothing but NPP's names; together they are all of npp.h's.
func TestNppExportsItsHeaders(t *testing.T) {
	dir := buildNpp(t)
	total := 0
	for _, l := range nppLibs {
		want := readNames(t, "../../apigen/desc/"+l+".txt", "fn ")
		if len(want) == 0 {
			t.Fatalf("desc/%s.txt has no functions", l)
		}
		total += len(want)
		checkExports(t, filepath.Join(dir, "lib"+l+".so.13"), "npp", "gpucloud_npp_guest", want)
	}
	// npp.h of CUDA 13.0 declares 10,428 functions: a description that lost some is a gap.
	if total < 10428 {
		t.Errorf("NPP's descriptions hold %d functions, want npp.h's 10428", total)
	}
	if _, err := os.Stat(filepath.Join(dir, "libnppif.so")); err != nil {
		t.Errorf("the development link libnppif.so: %v", err)
	}
}
