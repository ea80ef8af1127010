package main

// The math libraries remoted at their own API (cuSPARSE, cuFFT, cuRAND, cuSOLVER): each carries
// NVIDIA's runtime inside, so gpucloud's guest library answers for it and forwards its calls
// through one generic message per library (wire spec: SparseCall, FftCall, RandCall, SolverCall). Ids inside a library's
// message come from its wire range.
type mathLib struct {
	name       string   // the guest folder and the description's base name: cusparse, cufft, curand
	header     string   // the header extract reads (cufftXt.h includes cufft.h)
	more       []string // further headers of the library, read with header
	ret        string   // the status type every remotable function returns
	prefix     string
	firstID    int // function ids start here, inside the library's wire range
	lastID     int
	goLib      string // the backend.Lib constant
	soname     string
	status     string // the library's not-supported status, as C
	statusName string
	message    string // the wire message's lower-case name (gw_<message>_call)
}

var mathLibs = []mathLib{
	{name: "cusparse", header: "cusparse.h", ret: "cusparseStatus_t", prefix: "cusparse", firstID: 10010, lastID: 10999,
		goLib: "LibSparse", soname: "libcusparse.so.12", status: "10", statusName: "CUSPARSE_STATUS_NOT_SUPPORTED", message: "sparse"},
	{name: "cufft", header: "cufftXt.h", ret: "cufftResult", prefix: "cufft", firstID: 12010, lastID: 12499,
		goLib: "LibFft", soname: "libcufft.so.12", status: "16", statusName: "CUFFT_NOT_SUPPORTED", message: "fft"},
	{name: "curand", header: "curand.h", ret: "curandStatus_t", prefix: "curand", firstID: 12510, lastID: 12999,
		goLib: "LibRand", soname: "libcurand.so.10", status: "999", statusName: "CURAND_STATUS_INTERNAL_ERROR (cuRAND has no not-supported status)", message: "rand"},
	// cuSOLVER's ids 11100-11476 are those of its dense API's own call before it joined this path;
	// the sparse (cusolverSp*, with the low-level preview API) and refactorisation (cusolverRf*)
	// APIs come after. cusolverMg (several GPUs) is not in libcusolver.so.12.
	{name: "cusolver", header: "cusolverDn.h", more: []string{"cusolverSp.h", "cusolverSp_LOWLEVEL_PREVIEW.h", "cusolverRf.h"},
		ret: "cusolverStatus_t", prefix: "cusolver", firstID: 11100, lastID: 11999,
		goLib: "LibSolver", soname: "libcusolver.so.12", status: "9", statusName: "CUSOLVER_STATUS_NOT_SUPPORTED", message: "solver"},
	{name: "nvjpeg", header: "nvjpeg.h", ret: "nvjpegStatus_t", prefix: "nvjpeg", firstID: 15010, lastID: 15499,
		goLib: "LibJpeg", soname: "libnvjpeg.so.13", status: "9", statusName: "NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED", message: "jpeg"},
}

// extractLibs records the math libraries' prototypes (desc/<lib>.txt), keeping ids.
func extractLibs(headersDir, descDir string) error {
	var hs []header
	for _, l := range mathLibs {
		hs = append(hs, header{file: l.header, ret: l.ret, prefix: l.prefix, desc: l.name + ".txt", firstID: l.firstID, more: l.more})
	}
	return extractAll(headersDir, descDir, hs)
}
