// Command apigen generates gpucloud's CUDA API surface from a description of NVIDIA's headers.
//
//	apigen extract -headers DIR   reads cuda.h and cuda_runtime_api.h under DIR into desc/*.txt
//	apigen extract-libs -headers DIR  reads the math libraries' headers (cusparse.h ... nvjpeg.h, NPP's npp*.h) into desc/*.txt
//	apigen gen                    turns desc/ (descriptions, annotations, export lists) into code
//
// NVIDIA's headers are not in the repository (nor in CI): `extract` runs where they are, and its
// output, the description, is committed. `go generate ./gpuserverd/apigen` runs `gen`, whose
// output scripts/check-generated.sh checks for staleness. What `gen` writes, per exported name:
//   - the guest entry point (guest/driver/api_gen.c, guest/cudart/stubs_gen.c): a generic
//     remoting function when every parameter is a plain value, a device, a function/stream/event
//     handle or a pointer to one scalar output, else a stub that answers "not supported" once on
//     stderr. Both are weak symbols: a hand-written definition anywhere in the library wins.
//   - cuGetProcAddress's table (guest/driver/procs_gen.c): every exported name.
//   - the worker's table of generic calls (worker/apicalls_gen.go) and the real backend's calls
//     into NVIDIA's driver (backend/cuda/apicalls_gen.c).
//   - docs/cuda-coverage.md: every name, remoted or refused, and why.
package main

//go:generate go run . gen -root ../..

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: apigen extract -headers DIR | apigen gen [-root DIR]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "extract":
		fs := flag.NewFlagSet("extract", flag.ExitOnError)
		dir := fs.String("headers", "/work/cuda-headers/toolkit", "folder holding NVIDIA's cuda.h and cuda_runtime_api.h")
		out := fs.String("desc", "desc", "folder of the descriptions")
		fs.Parse(os.Args[2:])
		err = extract(*dir, *out)
	case "extract-libs":
		fs := flag.NewFlagSet("extract-libs", flag.ExitOnError)
		dir := fs.String("headers", "/work/cuda-headers/toolkit", "folder holding NVIDIA's cusparse.h, cufftXt.h and curand.h")
		out := fs.String("desc", "desc", "folder of the descriptions")
		fs.Parse(os.Args[2:])
		err = extractLibs(*dir, *out)
	case "gen":
		fs := flag.NewFlagSet("gen", flag.ExitOnError)
		root := fs.String("root", "../..", "the repository's root")
		fs.Parse(os.Args[2:])
		err = generate(*root)
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "apigen:", err)
		os.Exit(1)
	}
}
