package augment

import "unsafe"

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
//
// Both passes run on two 32-bit lanes per uint64: lane 0 holds element j of a row, lane 1
// element j+half. Every partial sum stays below 2³⁰ (the weights sum to 2¹⁴ and the values
// are at most 255, or 255·2⁸ between the passes), so the lanes never carry into each other
// and one 64-bit multiply-add does the work of two.
func (a *Augmenter) blur(pix []uint8, h, w, ch int, q []int32) {
	r := len(q) - 1
	if r == 0 {
		return
	}
	rowLen := w * ch
	half := (rowLen + 1) / 2
	padLen := rowLen + 2*r*ch
	a.blurPad = grow(a.blurPad, padLen+1) // +1: lane 1's element past the end of an odd row
	a.blurPacked = grow(a.blurPacked, half+2*r*ch)
	a.blurMid = grow(a.blurMid, h*half)
	a.blurAcc = grow(a.blurAcc, half)
	a.blurQ64 = grow(a.blurQ64, len(q))
	pad, packed, mid, acc, q64 := a.blurPad, a.blurPacked, a.blurMid, a.blurAcc, a.blurQ64
	for i, v := range q {
		q64[i] = uint64(v)
	}
	const (
		shift1 = blurBits - blurMidBits
		shift2 = blurBits + blurMidBits
		lanes  = 1 | 1<<32
		round1 = (1 << (shift1 - 1)) * lanes
		round2 = (1 << (shift2 - 1)) * lanes
		mask16 = 0xffff * lanes
	)
	pad[padLen] = 0
	// Horizontal: pad[(x+r)*ch …] is pixel x, mirrored beyond the edges.
	for y := range h {
		row := pix[y*rowLen : (y+1)*rowLen]
		copy(pad[r*ch:], row)
		for x := 1; x <= r; x++ {
			copy(pad[(r-x)*ch:(r-x+1)*ch], row[mirror(-x, w)*ch:])
			copy(pad[(r+w-1+x)*ch:(r+w+x)*ch], row[mirror(w-1+x, w)*ch:])
		}
		hi := pad[half : half+len(packed)]
		done := 0
		if hasVectorLoops && len(packed) >= 4 {
			done = len(packed) &^ 3
			packLanesAVX2(&packed[0], &pad[0], &hi[0], done)
		}
		for j := done; j < len(packed); j++ {
			packed[j] = uint64(pad[j]) | uint64(hi[j])<<32
		}
		a.sumTaps(acc, q64, func(t int) []uint64 { return packed[(r+t)*ch:] }, round1)
		out := mid[y*half : (y+1)*half]
		out = out[:len(acc)]
		done = 0
		if hasVectorLoops && len(acc) >= 4 {
			done = len(acc) &^ 3
			midLanesAVX2(&out[0], &acc[0], done, shift1)
		}
		for j := done; j < len(acc); j++ {
			out[j] = acc[j] >> shift1 & mask16
		}
	}
	// Vertical, over the rows of mid, mirrored beyond the top and bottom.
	for y := range h {
		a.sumTaps(acc, q64, func(t int) []uint64 { return mid[mirror(y+t, h)*half:] }, round2)
		out0 := pix[y*rowLen : y*rowLen+half]
		out0 = out0[:len(acc)]
		out1 := pix[y*rowLen+half : (y+1)*rowLen]
		done := 0
		if hasVectorLoops && len(out1) >= 8 {
			done = len(out1) &^ 7
			bytesOfLanesAVX2(&out0[0], &out1[0], &acc[0], done, shift2)
		}
		for j := done; j < len(acc); j++ {
			out0[j] = uint8(acc[j] >> shift2)
		}
		lane1 := acc[:len(out1)]
		for j := done; j < len(lane1); j++ {
			out1[j] = uint8(lane1[j] >> (32 + shift2))
		}
	}
}

// sumTaps is the package's sumTaps, with the AVX2 loop taking what it can: the same integers
// on 32-bit lanes, 8 at a time.
func (a *Augmenter) sumTaps(acc []uint64, q []uint64, c func(t int) []uint64, round uint64) {
	r, done := len(q)-1, 0
	if hasVectorLoops && r >= 1 && len(acc) >= 4 {
		done = len(acc) &^ 3
		a.blurPtrs = grow(a.blurPtrs, 2*r+1)
		for t := -r; t <= r; t++ {
			a.blurPtrs[r+t] = unsafe.Pointer(&c(t)[0])
		}
		sumTapsAVX2(&acc[0], done, &a.blurPtrs[0], &q[0], r, round)
	}
	if done < len(acc) {
		sumTaps(acc[done:], q, func(t int) []uint64 { return c(t)[done:] }, round)
	}
}

// sumTaps sets acc[i] = round + q[0]·c(0)[i] + Σ_t q[t]·(c(−t)[i] + c(t)[i]) for the symmetric
// kernel q: the centre and the first pair in one sweep over acc, then two pairs per sweep
// (more per sweep runs out of registers and is slower).
func sumTaps(acc []uint64, q []uint64, c func(t int) []uint64, round uint64) {
	r := len(q) - 1
	centre := c(0)[:len(acc)]
	q0 := q[0]
	t := 1
	if r >= 1 {
		l1, r1 := c(-1)[:len(acc)], c(1)[:len(acc)]
		q1 := q[1]
		for i := range acc {
			acc[i] = round + q0*centre[i] + q1*(l1[i]+r1[i])
		}
		t = 2
	} else {
		for i, v := range centre {
			acc[i] = round + q0*v
		}
	}
	for ; t+1 <= r; t += 2 {
		l1, r1 := c(-t)[:len(acc)], c(t)[:len(acc)]
		l2, r2 := c(-t - 1)[:len(acc)], c(t + 1)[:len(acc)]
		q1, q2 := q[t], q[t+1]
		for i := range acc {
			acc[i] += q1*(l1[i]+r1[i]) + q2*(l2[i]+r2[i])
		}
	}
	if t <= r {
		l1, r1 := c(-t)[:len(acc)], c(t)[:len(acc)]
		q1 := q[t]
		for i := range acc {
			acc[i] += q1 * (l1[i] + r1[i])
		}
	}
}
