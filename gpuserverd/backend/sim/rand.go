package sim

import (
	"encoding/binary"
	"math"

	"gpucloud/gpuserverd/backend"
)

// randGen is a simulated cuRAND generator: number i of a stream with seed s is splitmix64 of
// (s, offset+i). Not NVIDIA's sequences, but deterministic for a seed and offset, and advancing
// by what each call generates, as NVIDIA's are (a test double of NVIDIA's cuRAND).
type randGen struct {
	typ          uint64
	seed, offset uint64
	stream       backend.Handle
}

const (
	randPseudoDefault = 100
	randLengthNotMult = 105 // CURAND_STATUS_LENGTH_NOT_MULTIPLE
	randTypeError     = 103 // CURAND_STATUS_TYPE_ERROR
)

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

func (g *randGen) at(i uint64) uint64 {
	return splitmix(g.seed*0x2545f4914f6cdd1d ^ splitmix(g.offset+i))
}

var randCalls = map[string]func(*libCall) ([]uint64, error){
	"curandCreateGenerator": func(l *libCall) ([]uint64, error) {
		if t := l.word(1); t < randPseudoDefault || t > 199 {
			return nil, backend.LibStatus(l.Func, randTypeError, "the simulated backend makes pseudo-random generators only (type %d)", t)
		}
		return []uint64{l.c.newLibObj(&randGen{typ: l.word(1)})}, nil
	},
	"curandDestroyGenerator": func(l *libCall) ([]uint64, error) {
		if _, err := libObject[*randGen](l, 0); err != nil {
			return nil, err
		}
		l.c.dropLibObj(l.word(0))
		return nil, nil
	},
	"curandSetStream": libSetStream(func(o *randGen) *backend.Handle { return &o.stream }),
	"curandSetPseudoRandomGeneratorSeed": func(l *libCall) ([]uint64, error) {
		g, err := libObject[*randGen](l, 0)
		if err == nil {
			g.seed, g.offset = l.word(1), 0
		}
		return nil, err
	},
	"curandSetGeneratorOffset": func(l *libCall) ([]uint64, error) {
		g, err := libObject[*randGen](l, 0)
		if err == nil {
			g.offset = l.word(1)
		}
		return nil, err
	},
	"curandGenerate": func(l *libCall) ([]uint64, error) {
		return randFill(l, 4, false, func(u uint64) float64 { return float64(uint32(u >> 32)) })
	},
	"curandGenerateUniform": func(l *libCall) ([]uint64, error) {
		return randFill(l, 4, false, uniform)
	},
	"curandGenerateUniformDouble": func(l *libCall) ([]uint64, error) {
		return randFill(l, 8, false, uniform)
	},
	"curandGenerateNormal": func(l *libCall) ([]uint64, error) {
		return randNormal(l, 4, float64(l.f32(3)), float64(l.f32(4)))
	},
	"curandGenerateNormalDouble": func(l *libCall) ([]uint64, error) {
		return randNormal(l, 8, l.f64(3), l.f64(4))
	},
}

// uniform maps 64 random bits to (0, 1], as cuRAND's uniform excludes 0 and includes 1.
func uniform(u uint64) float64 { return (float64(u>>11) + 1) / (1 << 53) }

// randFill queues n = parameter 2 numbers of size bytes into parameter 1: element i is f of the
// generator's number i, stored as a u32 (an integer generate) or a float.
func randFill(l *libCall, size int64, normal bool, f func(uint64) float64) ([]uint64, error) {
	g, err := libObject[*randGen](l, 0)
	if err != nil {
		return nil, err
	}
	n := l.int(2)
	if n < 0 || n > MaxLibWork {
		return nil, backend.LibNotSupported(l.Func, "%d numbers: the simulated backend makes at most %d", n, MaxLibWork)
	}
	gen, dst, integer := *g, l.word(1), l.Func.Name == "curandGenerate"
	g.offset += uint64(n)
	return nil, l.launch(g.stream, func() error {
		out, err := l.c.viewElems(dst, n, size)
		if err != nil {
			return err
		}
		for i := int64(0); i < n; i++ {
			v := f(gen.at(uint64(i)))
			switch {
			case integer:
				binary.LittleEndian.PutUint32(out[i*4:], uint32(v))
			case size == 8:
				binary.LittleEndian.PutUint64(out[i*8:], math.Float64bits(v))
			default:
				binary.LittleEndian.PutUint32(out[i*4:], math.Float32bits(float32(v)))
			}
		}
		return nil
	})
}

// randNormal fills by Box-Muller pairs, so the simulated generator refuses an odd count
// (CURAND_STATUS_LENGTH_NOT_MULTIPLE, which cuRAND's documentation allows a pseudo-random generator
// to answer; NVIDIA's Philox takes one, as the H100 run showed).
func randNormal(l *libCall, size int64, mean, stddev float64) ([]uint64, error) {
	if l.int(2)%2 != 0 {
		return nil, backend.LibStatus(l.Func, randLengthNotMult, "%d numbers: normal numbers come in pairs", l.int(2))
	}
	g, err := libObject[*randGen](l, 0)
	if err != nil {
		return nil, err
	}
	pair := *g
	i := uint64(0)
	return randFill(l, size, true, func(uint64) float64 {
		k := i &^ 1
		u1, u2 := uniform(pair.at(k)), uniform(pair.at(k+1))
		r, th := math.Sqrt(-2*math.Log(u1)), 2*math.Pi*u2
		v := r * math.Cos(th)
		if i&1 == 1 {
			v = r * math.Sin(th)
		}
		i++
		return mean + stddev*v
	})
}
