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
	if n := len(pix) &^ 15; hasVectorLoops && n > 0 && F <= 1<<31/256 {
		brightnessAVX2(&pix[0], n, int32(F)) // F·255 fits 32-bit lanes
		pix = pix[n:]
	}
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
		done := 0
		for hasVectorLoops && done < len(pix) {
			m := min(vectorPixels(pix[done:]), 1<<23)
			if m == 0 {
				break
			}
			var lanes [8]int32
			lumaSumAVX2(&pix[done], m, &lanes)
			for _, l := range lanes {
				sum += int64(l)
			}
			done += 3 * m
		}
		for i := done; i+2 < len(pix); i += 3 {
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
	done := 0
	if n := vectorPixels(pix); hasVectorLoops && n > 0 && F <= 8*one {
		// 32-bit lanes hold F·v + (2¹⁶ − F)·L for F ≤ 8.
		saturationAVX2(&pix[0], n, int32(F))
		done = 3 * n
	}
	pix = pix[done:]
	if F > 5*one/2 {
		// Large factors: the general path (Validate allows factors up to 101).
		for i := 0; i+2 < len(pix); i += 3 {
			p := pix[i : i+3 : i+3]
			l := (one - F) * int64(luma(p[0], p[1], p[2]))
			p[0] = clampByte((F*int64(p[0]) + l) >> 16)
			p[1] = clampByte((F*int64(p[1]) + l) >> 16)
			p[2] = clampByte((F*int64(p[2]) + l) >> 16)
		}
		return
	}
	// For f ≤ 2.5 the blend lies in [−383, 638]: offset it by 384 and clamp by a table.
	const offset = 384
	var fv [256]int32
	for v := range fv {
		fv[v] = int32(F)*int32(v) + offset<<16
	}
	var clamp [1024]uint8
	for i := range clamp {
		clamp[i] = uint8(min(max(i-offset, 0), 255))
	}
	g := int32(one - F)
	for i := 0; i+2 < len(pix); i += 3 {
		p := pix[i : i+3 : i+3]
		l := g * int32(luma(p[0], p[1], p[2]))
		p[0] = clamp[uint32(fv[p[0]]+l)>>16&1023]
		p[1] = clamp[uint32(fv[p[1]]+l)>>16&1023]
		p[2] = clamp[uint32(fv[p[2]]+l)>>16&1023]
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
	done := 0
	if n := vectorPixels(pix); hasVectorLoops && n > 0 {
		hueAVX2(&pix[0], n, d)
		done = 3 * n
	}
	for i := done; i+2 < len(pix); i += 3 {
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
		// x / (C·2¹⁶) by a reciprocal: exact for x < 6·255·2¹⁶ (see recip).
		sextant := int32((uint64(x>>16) * recip[c]) >> 32)
		frac := x - sextant*(c<<16) // C·f in 16.16
		vals := [4]uint8{uint8(hi), uint8(lo), uint8(lo + frac>>16), uint8(hi - (frac+one-1)>>16)}
		perm := &hueSextants[sextant]
		p[0], p[1], p[2] = vals[perm[0]], vals[perm[1]], vals[perm[2]]
	}
}

// vectorPixels is how many of an RGB buffer's pixels the AVX2 colour loops take: blocks of 8,
// leaving at least two pixels (the loops read four bytes past their last pixel).
func vectorPixels(pix []uint8) int { return max(0, len(pix)/3-2) &^ 7 }

// hueSextants (read-only) says which of (max, min, rising middle, falling middle) each channel takes in
// each sextant: torchvision's _hsv2rgb table (v,t,p) (q,v,p) (p,v,t) (p,q,v) (t,p,v) (v,p,q).
var hueSextants = [6][3]uint8{{0, 2, 1}, {3, 0, 1}, {1, 0, 2}, {1, 3, 0}, {2, 1, 0}, {0, 1, 3}}

// recip (read-only): recip[c] = ⌈2³²/c⌉, so ⌊a/c⌋ = (a·recip[c]) >> 32 for every a < 2³²/256 and c ≤ 255: the
// error a·(recip[c] − 2³²/c)/2³² < a/2³² never reaches the distance 1/c from a to the next
// multiple of c.
var recip = func() (t [256]uint64) {
	for c := 1; c < 256; c++ {
		t[c] = (1<<32 + uint64(c) - 1) / uint64(c)
	}
	return t
}()

// grayscale replaces every pixel by its luma in all three channels. One channel: nothing to do.
func grayscale(pix []uint8, ch int) {
	if ch != 3 {
		return
	}
	done := 0
	if n := vectorPixels(pix); hasVectorLoops && n > 0 {
		grayscaleAVX2(&pix[0], n)
		done = 3 * n
	}
	for i := done; i+2 < len(pix); i += 3 {
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
