package augment

import (
	"fmt"
	"math"
)

// JitterOp names one of ColorJitter's four adjustments.
type JitterOp uint8

// The ColorJitter adjustments, numbered as torchvision's fn_idx.
const (
	OpBrightness JitterOp = iota
	OpContrast
	OpSaturation
	OpHue
)

func (o JitterOp) String() string {
	switch o {
	case OpBrightness:
		return "brightness"
	case OpContrast:
		return "contrast"
	case OpSaturation:
		return "saturation"
	case OpHue:
		return "hue"
	}
	return fmt.Sprintf("JitterOp(%d)", uint8(o))
}

// Plan is everything the randomness decided for one view; applying it is deterministic. An
// evaluation Config samples a Plan with no random step (its crop is the whole image, and
// Apply ignores it: the evaluation transform has no randomness).
type Plan struct {
	// The source rectangle that is resized to Size×Size.
	CropTop, CropLeft, CropH, CropW int
	Flip                            bool
	// Jitter says whether ColorJitter ran; Order is the order of its adjustments, and each
	// factor is its sampled value (1 for brightness, contrast and saturation and 0 for hue when
	// that adjustment is disabled in the Config).
	Jitter                                bool
	Order                                 [4]JitterOp
	Brightness, Contrast, Saturation, Hue float64
	Gray                                  bool
	Blur                                  bool
	Sigma                                 float64
	Solarize                              bool
}

// Sample draws the Plan of one view of an h×w image from r. The draws happen in this order,
// each only as written:
//
//  1. RandomResizedCrop, torchvision's get_params: up to 10 attempts, each drawing
//     area = h·w·Uniform(scale) and ratio = exp(Uniform(log min, log max)), then
//     cw = roundEven(√(area·ratio)), ch = roundEven(√(area/ratio)); the first attempt with
//     0 < cw ≤ w and 0 < ch ≤ h draws top = IntN(h−ch+1) then left = IntN(w−cw+1). With no
//     fitting attempt, the centre crop of the whole image clamped to the ratio range is used.
//  2. Flip: Float64() < FlipP.
//  3. Jitter: Float64() < JitterP; if so, the order is a Fisher–Yates shuffle of
//     (brightness, contrast, saturation, hue) (for i = 3…1: swap i with IntN(i+1)), then the
//     factors Uniform(max(0,1−b), 1+b) for brightness, contrast, saturation and
//     Uniform(−h, h) for hue, each drawn only when that parameter is non-zero.
//  4. Grayscale: Float64() < GrayP.
//  5. Blur: Float64() < BlurP.At(view); if so σ = Uniform(BlurSigma).
//  6. Solarize: Float64() < SolarizeP.At(view).
//
// The probability draws of 2–6 happen whatever their probability, so changing one
// probability does not shift the draws of the others.
func (c Config) Sample(h, w, view int, r *Rand) Plan {
	p := Plan{Brightness: 1, Contrast: 1, Saturation: 1, Order: [4]JitterOp{0, 1, 2, 3}}
	if c.Eval {
		p.CropH, p.CropW = h, w
		return p
	}
	p.CropTop, p.CropLeft, p.CropH, p.CropW = c.sampleCrop(h, w, r)
	p.Flip = r.Float64() < c.FlipP
	if r.Float64() < c.JitterP {
		p.Jitter = true
		for i := 3; i > 0; i-- {
			j := r.IntN(i + 1)
			p.Order[i], p.Order[j] = p.Order[j], p.Order[i]
		}
		factor := func(b float64) float64 {
			if b == 0 {
				return 1
			}
			return r.Uniform(max(0, 1-b), 1+b)
		}
		p.Brightness = factor(c.Brightness)
		p.Contrast = factor(c.Contrast)
		p.Saturation = factor(c.Saturation)
		if c.Hue != 0 {
			p.Hue = r.Uniform(-c.Hue, c.Hue)
		}
	}
	p.Gray = r.Float64() < c.GrayP
	if r.Float64() < c.BlurP.At(view) {
		p.Blur = true
		p.Sigma = r.Uniform(c.BlurSigma[0], c.BlurSigma[1])
	}
	p.Solarize = r.Float64() < c.SolarizeP.At(view)
	return p
}

// sampleCrop is torchvision's RandomResizedCrop.get_params (top, left, height, width).
func (c Config) sampleCrop(h, w int, r *Rand) (top, left, ch, cw int) {
	area := float64(h) * float64(w)
	logLo, logHi := detLog(c.CropRatio[0]), detLog(c.CropRatio[1])
	for range 10 {
		target := area * r.Uniform(c.CropScale[0], c.CropScale[1])
		ratio := detExp(r.Uniform(logLo, logHi))
		cw = int(math.RoundToEven(math.Sqrt(target * ratio)))
		ch = int(math.RoundToEven(math.Sqrt(target / ratio)))
		if cw > 0 && cw <= w && ch > 0 && ch <= h {
			top = r.IntN(h - ch + 1)
			left = r.IntN(w - cw + 1)
			return top, left, ch, cw
		}
	}
	inRatio := float64(w) / float64(h)
	switch {
	case inRatio < c.CropRatio[0]:
		cw = w
		ch = int(math.RoundToEven(float64(cw) / c.CropRatio[0]))
	case inRatio > c.CropRatio[1]:
		ch = h
		cw = int(math.RoundToEven(float64(ch) * c.CropRatio[1]))
	default:
		cw, ch = w, h
	}
	// torchvision can return an empty crop here for extreme ratio ranges; keep one pixel.
	cw, ch = min(max(cw, 1), w), min(max(ch, 1), h)
	return (h - ch) / 2, (w - cw) / 2, ch, cw
}
