package main

import (
	"strings"
	"testing"
)

// NPP's conventions decide its functions' kinds: pointers are device addresses unless NVIDIA's
// documentation says host; a host pointer is an output only as an hp*Size of one value; fixed
// arrays are host inputs (const) or refused (written); structs by value travel as their bytes,
// the stream context as c.
func TestNppKinds(t *testing.T) {
	d, err := parseDesc([]byte(`fn 1 nppiA NppStatus (const Npp8u * pSrc, int nSrcStep, NppiSize oSizeROI, NppStreamContext nppStreamCtx)
fn 2 nppiB NppStatus (NppiSize oSizeROI, size_t * hpBufferSize)
fn 3 nppiC NppStatus (Npp8u * pSrcDst, int * pNewNumber, NppStreamContext nppStreamCtx)
fn 4 nppiD NppStatus (const Npp8u aValue[3], Npp8u * pDst[3], Npp32f nScale)
fn 5 nppiE NppStatus (Npp64f aSum[3])
fn 6 nppiF NppStatus (Npp32s * hpLevels, int nLevels)
fn 7 nppiG NppStatus (NppiRect oRect, const double aCoeffs[2][3])
fn 8 nppiH NppStatus (Npp8u * pDst, int n)
type struct NppiSize
type struct NppiRect
type struct NppStreamContext
type i32 int
type u8 Npp8u
type i32 Npp32s
type f32 Npp32f
type f64 Npp64f
type f64 double
type u64 size_t
struct NppiSize i32:width i32:height
struct NppiRect i32:x i32:y i32:width i32:height
struct NppStreamContext ptr:hStream i32:a i32:b i32:c i32:d u64:e i32:f i32:g u32:h i32:i
host nppiC pNewNumber
host nppiH ?
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		i          int
		kinds, why string
	}{
		{0, "d v b:8 c:48", ""},
		{1, "b:8 r", ""},
		{2, "", "host pointer pNewNumber"},
		{3, "h:3*1 h:3*8 v", ""},
		{4, "", "host output array aSum"},
		{5, "", "host pointer hpLevels"},
		{6, "b:16 h:6*8", ""},
		{7, "", "pointer pDst of an undocumented function"},
	} {
		f := d.fns[c.i]
		kinds, why := nppKinds(libFn{fn: f, params: splitParams(f.params)}, d)
		if got := strings.Join(kinds, " "); got != c.kinds || !strings.Contains(why, c.why) || (c.why == "") != (why == "") {
			t.Errorf("%s: got %q %q, want %q %q", f.name, got, why, c.kinds, c.why)
		}
	}
}
