package augment

import "math"

// Colour adjustments on HWC uint8 pixels. torchvision blends in float32 and truncates to uint8;
// these blend in 16.16 fixed point and floor, which is the same up to the factor's rounding to
// a multiple of 2⁻¹⁶ (and avoids float32's habit of turning 0.7·x + 0.3·x into x − 1).

const one = 1 << 16

// fixed returns f in 16.16 fixed point.
func fixed(f float64) int64 { return int64(math.RoundToEven(f * one)) }

// luma is ITU-R 601-2 luma with Pillow's rounding: L = (19595 R + 38470 G + 7471 B + 2¹⁵) >> 16,
// i.e. round(0.299 R + 0.587 G + 0.114 B).
func luma(r, g, b uint8) uint8 {
	return uint8((19595*uint32(r) + 38470*uint32(g) + 7471*uint32(b) + 1<<15) >> 16)
}

func clampByte(v int64) uint8 {
	if v < 0 {
		return 0
	}
	if v > 255 {
		return 255
	}
	return uint8(v)
}

func applyLUT(pix []uint8, lut *[256]uint8) {
	for i, v := range pix {
		pix[i] = lut[v]
	}
}

// brightness multiplies every value by f: out = min(255, ⌊F·v / 2¹⁶⌋), F = round(f·2¹⁶).
func brightness(pix []uint8, f float64, lut *[256]uint8) {
	F := fixed(f)
	for v := range lut {
		lut[v] = clampByte(F * int64(v) >> 16)
	}
	applyLUT(pix, lut)
}

// contrast blends every value with the mean m of the image's luma (the mean of the values for
// one channel): out = ⌊(F·v + (2¹⁶ − F)·m) / 2¹⁶⌋ clamped, with m the exact rational mean.
func contrast(pix []uint8, ch int, f float64, lut *[256]uint8) {
	var sum, n int64
	if ch == 3 {
		for i := 0; i+2 < len(pix); i += 3 {
			sum += int64(luma(pix[i], pix[i+1], pix[i+2]))
		}
		n = int64(len(pix) / 3)
	} else {
		for _, v := range pix {
			sum += int64(v)
		}
		n = int64(len(pix))
	}
	F := fixed(f)
	den := one * n
	for v := range lut {
		num := F*int64(v)*n + (one-F)*sum
		lut[v] = clampByte(floorDiv(num, den))
	}
	applyLUT(pix, lut)
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// saturation blends every pixel with its luma: out = ⌊(F·v + (2¹⁶ − F)·L) / 2¹⁶⌋ clamped.
// One channel: nothing to do (a gray image is its own grayscale).
func saturation(pix []uint8, ch int, f float64) {
	if ch != 3 {
		return
	}
	F := fixed(f)
	G := one - F
	for i := 0; i+2 < len(pix); i += 3 {
		p := pix[i : i+3 : i+3]
		l := G * int64(luma(p[0], p[1], p[2]))
		p[0] = clampByte((F*int64(p[0]) + l) >> 16)
		p[1] = clampByte((F*int64(p[1]) + l) >> 16)
		p[2] = clampByte((F*int64(p[2]) + l) >> 16)
	}
}

// hue rotates every pixel's HSV hue by h turns, keeping saturation and value, as torchvision's
// adjust_hue does (RGB → HSV, h ← (h + shift) mod 1, HSV → RGB), but on integers: the hue is
// held as a position in [0, 6·C) (C = max − min, six sextants) to 16 fractional bits, so the
// rotated pixel keeps max and min exactly and its middle value is floored like torchvision's
// uint8 cast. One channel: nothing to do (gray pixels have no hue).
func hue(pix []uint8, ch int, h float64) {
	if ch != 3 {
		return
	}
	d := int32(math.RoundToEven(float64(h*6) * one)) // the shift in sextants, 16.16
	if d == 0 {
		return
	}
	for i := 0; i+2 < len(pix); i += 3 {
		p := pix[i : i+3 : i+3]
		r, g, b := int32(p[0]), int32(p[1]), int32(p[2])
		hi, lo := max(r, g, b), min(r, g, b)
		c := hi - lo
		if c == 0 {
			continue
		}
		var pos int32 // hue position in units of 1/C sextant
		switch hi {
		case r:
			pos = g - b
			if pos < 0 {
				pos += 6 * c
			}
		case g:
			pos = 2*c + b - r
		default:
			pos = 4*c + r - g
		}
		x := pos<<16 + d*c
		period := 6 * c << 16
		if x < 0 {
			x += period
		} else if x >= period {
			x -= period
		}
		unit := c << 16
		sextant := x / unit
		frac := x - sextant*unit // C·f in 16.16
		rise := uint8(lo + frac>>16)
		fall := uint8(hi - (frac+one-1)>>16)
		v, m := uint8(hi), uint8(lo)
		switch sextant {
		case 0:
			p[0], p[1], p[2] = v, rise, m
		case 1:
			p[0], p[1], p[2] = fall, v, m
		case 2:
			p[0], p[1], p[2] = m, v, rise
		case 3:
			p[0], p[1], p[2] = m, fall, v
		case 4:
			p[0], p[1], p[2] = rise, m, v
		default:
			p[0], p[1], p[2] = v, m, fall
		}
	}
}

// grayscale replaces every pixel by its luma in all three channels. One channel: nothing to do.
func grayscale(pix []uint8, ch int) {
	if ch != 3 {
		return
	}
	for i := 0; i+2 < len(pix); i += 3 {
		p := pix[i : i+3 : i+3]
		l := luma(p[0], p[1], p[2])
		p[0], p[1], p[2] = l, l, l
	}
}

// solarize inverts every value at or above threshold: v ≥ t → 255 − v.
func solarize(pix []uint8, threshold int, lut *[256]uint8) {
	for v := range lut {
		if v >= threshold {
			lut[v] = uint8(255 - v)
		} else {
			lut[v] = uint8(v)
		}
	}
	applyLUT(pix, lut)
}
