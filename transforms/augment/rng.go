package augment

import (
	"crypto/sha256"
	"encoding/binary"
	"math"
	"math/bits"
	"math/rand/v2"
)

// seedDomain separates this package's PRNG seeds from any other use of SHA-256 on the same
// tuple; changing it (or anything below) changes every view ever generated, so it carries a
// version.
const seedDomain = "dcl-beam/augment/v1"

// ViewSeed returns the two 64-bit words that seed the PCG generator of one view:
//
//	h = SHA-256( "dcl-beam/augment/v1" || 0x00 ||
//	             le64(seed) || le64(epoch) || le64(view) || le64(len(key)) || key )
//	seed1 = le64(h[0:8]), seed2 = le64(h[8:16])
//
// where le64 is the 8-byte little-endian two's-complement encoding and key is the example key
// as raw bytes. The generator is math/rand/v2's PCG (128-bit LCG, DXSM output) seeded with
// rand.NewPCG(seed1, seed2); its Uint64 stream is fixed by its published algorithm, and this
// package derives every draw from that stream with its own documented arithmetic (see Rand),
// so a view does not depend on how a Go release implements rand.Rand's helpers.
func ViewSeed(seed uint64, key string, epoch, view int) (seed1, seed2 uint64) {
	var buf [128]byte // keys up to ~70 bytes hash without allocating
	msg := append(buf[:0], seedDomain...)
	msg = append(msg, 0)
	msg = binary.LittleEndian.AppendUint64(msg, seed)
	msg = binary.LittleEndian.AppendUint64(msg, uint64(epoch))
	msg = binary.LittleEndian.AppendUint64(msg, uint64(view))
	msg = binary.LittleEndian.AppendUint64(msg, uint64(len(key)))
	msg = append(msg, key...)
	sum := sha256.Sum256(msg)
	return binary.LittleEndian.Uint64(sum[0:8]), binary.LittleEndian.Uint64(sum[8:16])
}

// Rand is the random stream of one view. Its draws are defined on the PCG Uint64 stream x:
//
//	Float64()      = (x >> 11) · 2⁻⁵³                       (uniform on [0, 1))
//	Uniform(a, b)  = a + round64((b − a) · Float64())       (torchvision's uniform_)
//	IntN(n)        = Lemire's multiply-shift: hi64(x·n), redrawing x while lo64(x·n) < (2⁶⁴ mod n)
//
// where round64 is an explicit rounding to float64 (no fused multiply-add), so every platform
// computes the same bits.
type Rand struct {
	pcg rand.PCG
}

// NewRand returns the stream of one view (see ViewSeed).
func NewRand(seed uint64, key string, epoch, view int) *Rand {
	r := &Rand{}
	r.reset(seed, key, epoch, view)
	return r
}

func (r *Rand) reset(seed uint64, key string, epoch, view int) {
	r.pcg.Seed(ViewSeed(seed, key, epoch, view))
}

// Uint64 returns the next raw 64-bit value of the stream.
func (r *Rand) Uint64() uint64 { return r.pcg.Uint64() }

// Float64 returns a uniform value in [0, 1) with 53 random bits.
func (r *Rand) Float64() float64 { return float64(r.pcg.Uint64()>>11) * 0x1p-53 }

// Uniform returns a uniform value in [a, b) (or [b, a) when b < a).
func (r *Rand) Uniform(a, b float64) float64 {
	return a + float64((b-a)*r.Float64())
}

// IntN returns a uniform integer in [0, n); n must be positive.
func (r *Rand) IntN(n int) int {
	un := uint64(n)
	hi, lo := bits.Mul64(r.pcg.Uint64(), un)
	if lo < un {
		thresh := -un % un
		for lo < thresh {
			hi, lo = bits.Mul64(r.pcg.Uint64(), un)
		}
	}
	return int(hi)
}

// detExp is math.Exp computed with Go's portable algorithm (FreeBSD's e_exp.c) and every
// product rounded explicitly: math.Exp uses assembly on amd64 and arm64 whose last bit may
// differ, and Go may fuse x*y+z on arm64 (and amd64 with GOAMD64=v3), which would make a
// view depend on the machine that computed it.
func detExp(x float64) float64 {
	const (
		ln2Hi     = 6.93147180369123816490e-01
		ln2Lo     = 1.90821492927058770002e-10
		log2e     = 1.44269504088896338700e+00
		overflow  = 7.09782712893383973096e+02
		underflow = -7.45133219101941108420e+02
		nearZero  = 1.0 / (1 << 28)

		p1 = 1.66666666666666657415e-01
		p2 = -2.77777777770155933842e-03
		p3 = 6.61375632143793436117e-05
		p4 = -1.65339022054652515390e-06
		p5 = 4.13813679705723846039e-08
	)
	switch {
	case math.IsNaN(x):
		return x
	case x > overflow:
		return math.Inf(1)
	case x < underflow:
		return 0
	case -nearZero < x && x < nearZero:
		return 1 + x
	}
	var k int
	switch {
	case x < 0:
		k = int(float64(log2e*x) - 0.5)
	case x > 0:
		k = int(float64(log2e*x) + 0.5)
	}
	hi := x - float64(float64(k)*ln2Hi)
	lo := float64(float64(k) * ln2Lo)

	r := hi - lo
	t := float64(r * r)
	c := r - float64(t*(p1+float64(t*(p2+float64(t*(p3+float64(t*(p4+float64(t*p5)))))))))
	y := 1 - ((lo - float64(r*c)/(2-c)) - hi)
	return math.Ldexp(y, k)
}

// detLog is math.Log computed with Go's portable algorithm (FreeBSD's e_log.c) with every
// product rounded explicitly; see detExp for why.
func detLog(x float64) float64 {
	const (
		ln2Hi = 6.93147180369123816490e-01
		ln2Lo = 1.90821492927058770002e-10
		l1    = 6.666666666666735130e-01
		l2    = 3.999999999940941908e-01
		l3    = 2.857142874366239149e-01
		l4    = 2.222219843214978396e-01
		l5    = 1.818357216161805012e-01
		l6    = 1.531383769920937332e-01
		l7    = 1.479819860511658591e-01
	)
	switch {
	case math.IsNaN(x) || math.IsInf(x, 1):
		return x
	case x < 0:
		return math.NaN()
	case x == 0:
		return math.Inf(-1)
	}
	f1, ki := math.Frexp(x)
	if f1 < math.Sqrt2/2 {
		f1 *= 2
		ki--
	}
	f := f1 - 1
	k := float64(ki)

	s := f / (2 + f)
	s2 := float64(s * s)
	s4 := float64(s2 * s2)
	t1 := float64(s2 * (l1 + float64(s4*(l3+float64(s4*(l5+float64(s4*l7)))))))
	t2 := float64(s4 * (l2 + float64(s4*(l4+float64(s4*l6)))))
	rr := t1 + t2
	hfsq := float64(float64(0.5*f) * f)
	return float64(k*ln2Hi) - ((hfsq - (float64(s*(hfsq+rr)) + float64(k*ln2Lo))) - f)
}
