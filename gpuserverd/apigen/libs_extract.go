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
	// npp: one of NPP's libraries (nppParts): its guest files are guest/npp/<name>_gen.c, one line
	// per function over a signature's macro (NPP's 10,000 functions have some 300 signatures); its
	// pointers are device addresses unless NVIDIA's documentation says host (nppKinds), and its
	// few functions that return no NppStatus are hand-written.
	npp bool
}

// dir is the guest folder of lib's sources.
func (l mathLib) dir() string {
	if l.npp {
		return "npp"
	}
	return l.name
}

// NPP's libraries, each with the headers of its functions (NVIDIA splits npp.h's headers so) and a
// range of function ids of its own inside NppCall: NPP has 10,428 functions, more than its wire
// range (15500-16999) has ids, so its function ids are 15500 * 1000 + the library's 10,000s (u32,
// unique among the libraries'; the messages' ids stay in the range).
var nppParts = []struct {
	name   string
	header []string
}{
	{"nppc", []string{"nppcore.h"}},
	{"nppial", []string{"nppi_arithmetic_and_logical_operations.h"}},
	{"nppicc", []string{"nppi_color_conversion.h"}},
	{"nppidei", []string{"nppi_data_exchange_and_initialization.h"}},
	{"nppif", []string{"nppi_filtering_functions.h"}},
	{"nppig", []string{"nppi_geometry_transforms.h"}},
	{"nppim", []string{"nppi_morphological_operations.h"}},
	{"nppist", []string{"nppi_statistics_functions.h", "nppi_linear_transforms.h"}},
	{"nppisu", []string{"nppi_support_functions.h"}},
	{"nppitc", []string{"nppi_threshold_and_compare_operations.h"}},
	{"npps", []string{"npps_arithmetic_and_logical_operations.h", "npps_conversion_functions.h", "npps_filtering_functions.h",
		"npps_initialization.h", "npps_statistics_functions.h", "npps_support_functions.h"}},
}

const nppFirstFn = 15500 * 1000

func init() {
	for i, p := range nppParts {
		first := nppFirstFn + 10000*i
		mathLibs = append(mathLibs, mathLib{name: p.name, header: p.header[0], more: p.header[1:], ret: "NppStatus", prefix: "npp",
			firstID: first, lastID: first + 9999, goLib: "LibNpp", soname: "lib" + p.name + ".so.13", status: "-9999",
			statusName: "NPP_NOT_SUPPORTED_MODE_ERROR", message: "npp", npp: true})
	}
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
		hs = append(hs, header{file: l.header, ret: l.ret, prefix: l.prefix, desc: l.name + ".txt", firstID: l.firstID, more: l.more, others: l.npp})
	}
	return extractAll(headersDir, descDir, hs)
}
