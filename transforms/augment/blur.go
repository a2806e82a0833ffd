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
	a.blurAcc = grow(a.blurAcc, rowLen)
	pad, mid, acc := a.blurPad, a.blurMid, a.blurAcc
	const (
		shift1 = blurBits - blurMidBits
		round1 = 1 << (shift1 - 1)
		shift2 = blurBits + blurMidBits
		round2 = 1 << (shift2 - 1)
	)
	// Horizontal: pad[(x+r)*ch …] is pixel x, mirrored beyond the edges.
	for y := range h {
		row := pix[y*rowLen : (y+1)*rowLen]
		copy(pad[r*ch:], row)
		for x := 1; x <= r; x++ {
			copy(pad[(r-x)*ch:(r-x+1)*ch], row[mirror(-x, w)*ch:])
			copy(pad[(r+w-1+x)*ch:(r+w+x)*ch], row[mirror(w-1+x, w)*ch:])
		}
		sumTaps(acc, q, func(t int) []uint8 { return pad[(r+t)*ch:] }, round1)
		out := mid[y*rowLen : (y+1)*rowLen]
		out = out[:len(acc)]
		for i, v := range acc {
			out[i] = uint16(v >> shift1)
		}
	}
	// Vertical, over the rows of mid, mirrored beyond the top and bottom.
	for y := range h {
		sumTaps(acc, q, func(t int) []uint16 { return mid[mirror(y+t, h)*rowLen:] }, round2)
		out := pix[y*rowLen : (y+1)*rowLen]
		out = out[:len(acc)]
		for i, v := range acc {
			out[i] = uint8(min(v>>shift2, 255))
		}
	}
}

// sumTaps sets acc[i] = round + q[0]·c(0)[i] + Σ_t q[t]·(c(−t)[i] + c(t)[i]) for the symmetric
// kernel q: the centre and the first pair in one sweep over acc, then two pairs per sweep
// (more per sweep runs out of registers and is slower).
func sumTaps[T uint8 | uint16](acc []int32, q []int32, c func(t int) []T, round int32) {
	r := len(q) - 1
	centre := c(0)[:len(acc)]
	q0 := q[0]
	t := 1
	if r >= 1 {
		l1, r1 := c(-1)[:len(acc)], c(1)[:len(acc)]
		q1 := q[1]
		for i := range acc {
			acc[i] = round + q0*int32(centre[i]) + q1*(int32(l1[i])+int32(r1[i]))
		}
		t = 2
	} else {
		for i, v := range centre {
			acc[i] = round + q0*int32(v)
		}
	}
	for ; t+1 <= r; t += 2 {
		l1, r1 := c(-t)[:len(acc)], c(t)[:len(acc)]
		l2, r2 := c(-t - 1)[:len(acc)], c(t + 1)[:len(acc)]
		q1, q2 := q[t], q[t+1]
		for i := range acc {
			acc[i] += q1*(int32(l1[i])+int32(r1[i])) + q2*(int32(l2[i])+int32(r2[i]))
		}
	}
	if t <= r {
		l1, r1 := c(-t)[:len(acc)], c(t)[:len(acc)]
		q1 := q[t]
		for i := range acc {
			acc[i] += q1 * (int32(l1[i]) + int32(r1[i]))
		}
	}
}
