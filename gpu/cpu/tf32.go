package cpu

import (
	"math"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
)

// RoundTF32 rounds x to the nearest TF32 value (float32's 8-bit exponent, a 10-bit mantissa),
// ties to even: the operands a TF32 tensor core multiplies. Infinities and NaNs pass through.
func RoundTF32(x float32) float32 {
	b := math.Float32bits(x)
	if b&0x7f800000 == 0x7f800000 {
		return x
	}
	const dropped = 13 // 23 - 10 mantissa bits
	b += 1<<(dropped-1) - 1 + (b>>dropped)&1
	return math.Float32frombits(b &^ (1<<dropped - 1))
}

// productOperands returns the two operands of a convolution or matrix product as the backend
// multiplies them: a and b themselves, or, with Config.EmulateTF32, copies rounded to TF32
// (temps holds the copies' buffers, for the caller to release).
func (be *Backend) productOperands(a, b []float32) (ra, rb []float32, temps []compute.Buffer, err error) {
	if !be.emulateTF32 {
		return a, b, nil, nil
	}
	round := func(src []float32) ([]float32, error) {
		t, dst, err := be.newF32(shapes.Make(dtypes.Float32, len(src)))
		if err != nil {
			return nil, err
		}
		temps = append(temps, t)
		for i, v := range src {
			dst[i] = RoundTF32(v)
		}
		return dst, nil
	}
	if ra, err = round(a); err != nil {
		return nil, nil, temps, err
	}
	if rb, err = round(b); err != nil {
		return nil, nil, temps, err
	}
	return ra, rb, temps, nil
}

// releaseAll releases buffers the backend allocated for one operation.
func (be *Backend) releaseAll(bufs []compute.Buffer) {
	for _, t := range bufs {
		be.release(t)
	}
}
