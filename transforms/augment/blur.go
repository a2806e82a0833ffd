package augment

// Gaussian blur as torchvision's gaussian_blur: a separable kernel of odd side k with weights
// exp(−x²/2σ²) for x = −k/2 … k/2, normalised to sum 1, and 'reflect' padding (mirror without
// repeating the edge: −1 → 1). Here the weights are fixed to 14 fractional bits (the centre
// weight takes the rounding remainder so they sum to exactly 1, and zero outer weights are
// dropped), the horizontal pass keeps 8 fractional bits, and the vertical pass rounds to
// nearest, as torchvision's final round() does. Images narrower than the kernel's radius,
// which torchvision refuses, are mirrored repeatedly.

const (
	blurBits    = 14 // kernel weights' fractional bits
	blurMidBits = 8  // fractional bits kept between the passes
)

// blurKernel returns the one-sided quantised kernel q[0] (centre) … q[r]; r may be smaller
// than size/2 when outer weights round to zero.
func (a *Augmenter) blurKernel(size int, sigma float64) []int32 {
	radius := size / 2
	a.blurW = grow(a.blurW, radius+1)
	w := a.blurW
	var sum float64
	for i := range w {
		t := float64(float64(i) / sigma)
		w[i] = detExp(float64(-0.5 * float64(t*t)))
		if i == 0 {
			sum += w[i]
		} else {
			sum += 2 * w[i]
		}
	}
	a.blurQ = grow(a.blurQ, radius+1)
	q := a.blurQ
	total := int32(0)
	last := 0
	for i := range w {
		q[i] = int32(float64(w[i]/sum*(1<<blurBits)) + 0.5)
		if q[i] != 0 {
			last = i
		}
		if i == 0 {
			total += q[i]
		} else {
			total += 2 * q[i]
		}
	}
	q[0] += 1<<blurBits - total
	return q[:last+1]
}

// mirror maps any index to [0, n) by reflecting at both edges (torch's 'reflect' padding,
// repeated when the padding is larger than the image).
func mirror(i, n int) int {
	if n == 1 {
		return 0
	}
	period := 2 * (n - 1)
	i %= period
	if i < 0 {
		i += period
	}
	if i >= n {
		i = period - i
	}
	return i
}

// blur blurs the h×w×ch image in place with kernel q (see blurKernel).
func (a *Augmenter) blur(pix []uint8, h, w, ch int, q []int32) {
	r := len(q) - 1
	if r == 0 {
		return
	}
	rowLen := w * ch
	a.blurPad = grow(a.blurPad, (w+2*r)*ch)
	a.blurMid = grow(a.blurMid, h*rowLen)
	pad, mid := a.blurPad, a.blurMid
	q0 := q[0]
	const round1 = 1 << (blurBits - blurMidBits - 1)
	for y := range h {
		row := pix[y*rowLen : (y+1)*rowLen]
		for x := -r; x < w+r; x++ {
			copy(pad[(x+r)*ch:(x+r+1)*ch], row[mirror(x, w)*ch:])
		}
		out := mid[y*rowLen : (y+1)*rowLen]
		// pad[i + r*ch] is the pixel of out[i]; its taps at distance t are ±t*ch away.
		centre := pad[r*ch : r*ch+rowLen]
		acc := grow(a.blurAcc, rowLen)
		a.blurAcc = acc
		for i, v := range centre {
			acc[i] = q0*int32(v) + round1
		}
		for t := 1; t <= r; t++ {
			left := pad[(r-t)*ch : (r-t)*ch+rowLen]
			right := pad[(r+t)*ch : (r+t)*ch+rowLen]
			qt := q[t]
			for i := range acc {
				acc[i] += qt * (int32(left[i]) + int32(right[i]))
			}
		}
		for i, v := range acc {
			out[i] = uint16(v >> (blurBits - blurMidBits))
		}
	}
	const round2 = 1 << (blurBits + blurMidBits - 1)
	acc := grow(a.blurAcc, rowLen)
	a.blurAcc = acc
	for y := range h {
		centre := mid[y*rowLen : (y+1)*rowLen]
		for i, v := range centre {
			acc[i] = q0*int32(v) + round2
		}
		for t := 1; t <= r; t++ {
			up := mid[mirror(y-t, h)*rowLen:][:rowLen]
			down := mid[mirror(y+t, h)*rowLen:][:rowLen]
			qt := q[t]
			for i := range acc {
				acc[i] += qt * (int32(up[i]) + int32(down[i]))
			}
		}
		out := pix[y*rowLen : (y+1)*rowLen]
		for i, v := range acc {
			out[i] = uint8(min(v>>(blurBits+blurMidBits), 255))
		}
	}
}
