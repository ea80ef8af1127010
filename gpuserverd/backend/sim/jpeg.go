package sim

import (
	"encoding/binary"

	"gpucloud/gpuserverd/backend"
)

// The simulated nvJPEG (a test double of NVIDIA's): handles, states, decoders and parameters are
// made and destroyed, and nvjpegGetImageInfo reads a baseline or progressive JPEG's frame header
// (components, chroma subsampling, each component's size). It decodes and encodes nothing:
// nvjpegDecode and the encoder answer NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED, saying the
// simulated backend does not compute them; only NVIDIA's library (the GPU run) does.
type jpegObj struct{ kind string }

const (
	jpegBadJpeg   = 3 // NVJPEG_STATUS_BAD_JPEG
	jpegMaxComp   = 4 // NVJPEG_MAX_COMPONENT
	jpegCssGray   = 6
	jpegCssUnknow = -1
)

var jpegCalls = map[string]func(*libCall) ([]uint64, error){
	"nvjpegGetImageInfo": jpegImageInfo,
}

func init() {
	// name of the create function: the new object's parameter; the destroy function
	for create, k := range map[string]struct {
		out     int
		destroy string
	}{
		"nvjpegCreateSimple": {0, "nvjpegDestroy"}, "nvjpegCreate": {2, ""}, "nvjpegCreateEx": {4, ""},
		"nvjpegJpegStateCreate": {1, "nvjpegJpegStateDestroy"}, "nvjpegDecoderCreate": {2, "nvjpegDecoderDestroy"},
		"nvjpegDecodeParamsCreate": {1, "nvjpegDecodeParamsDestroy"}, "nvjpegJpegStreamCreate": {1, "nvjpegJpegStreamDestroy"},
	} {
		kind := create
		jpegCalls[create] = func(l *libCall) ([]uint64, error) {
			if k.out > 0 { // made from a handle
				if _, err := libObject[*jpegObj](l, 0); err != nil && create != "nvjpegCreate" && create != "nvjpegCreateEx" {
					return nil, err
				}
			}
			return []uint64{l.c.newLibObj(&jpegObj{kind: kind})}, nil
		}
		if k.destroy != "" {
			jpegCalls[k.destroy] = spDestroy[*jpegObj]
		}
	}
}

// jpegImageInfo: handle, data, length, nComponents, subsampling, widths, heights.
func jpegImageInfo(l *libCall) ([]uint64, error) {
	if _, err := libObject[*jpegObj](l, 0); err != nil {
		return nil, err
	}
	data, widths, heights := l.Host[1], l.Host[5], l.Host[6]
	bad := func(why string) error { return backend.LibStatus(l.Func, jpegBadJpeg, "%s", why) }
	if len(data) < 4 || data[0] != 0xff || data[1] != 0xd8 {
		return nil, bad("no start of image")
	}
	for i := 2; i+4 <= len(data); {
		if data[i] != 0xff {
			return nil, bad("no marker")
		}
		m, n := data[i+1], int(binary.BigEndian.Uint16(data[i+2:]))
		if m == 0xd9 || m == 0xda || n < 2 || i+2+n > len(data) {
			break // end of image, start of scan or a truncated segment: no frame header before it
		}
		seg := data[i+4 : i+2+n]
		if m >= 0xc0 && m <= 0xcf && m != 0xc4 && m != 0xc8 && m != 0xcc { // a start of frame
			if len(seg) < 6 || len(seg) < 6+3*int(seg[5]) || seg[5] < 1 || seg[5] > jpegMaxComp {
				return nil, bad("a frame header too short")
			}
			h, w, nc := int(binary.BigEndian.Uint16(seg[1:])), int(binary.BigEndian.Uint16(seg[3:])), int(seg[5])
			hmax, vmax := 1, 1
			for c := 0; c < nc; c++ {
				f := seg[6+3*c+1]
				hmax, vmax = max(hmax, int(f>>4)), max(vmax, int(f&15))
			}
			for c := 0; c < nc; c++ {
				f := seg[6+3*c+1]
				hs, vs := max(int(f>>4), 1), max(int(f&15), 1)
				if widths != nil {
					binary.LittleEndian.PutUint32(widths[4*c:], uint32((w*hs+hmax-1)/hmax))
				}
				if heights != nil {
					binary.LittleEndian.PutUint32(heights[4*c:], uint32((h*vs+vmax-1)/vmax))
				}
			}
			css := int32(jpegCssUnknow)
			switch {
			case nc == 1:
				css = jpegCssGray
			case nc == 3 && hmax == 1 && vmax == 1:
				css = 0 // 444
			case nc == 3 && hmax == 2 && vmax == 1:
				css = 1 // 422
			case nc == 3 && hmax == 2 && vmax == 2:
				css = 2 // 420
			}
			return []uint64{uint64(nc), uint64(uint32(css))}, nil
		}
		i += 2 + n
	}
	return nil, bad("no frame header")
}
