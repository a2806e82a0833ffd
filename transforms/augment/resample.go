package augment

import "math"

// The resampler is Pillow's Image.resize(size, BILINEAR) (Resample.c), which is what
// torchvision runs on PIL images and what its antialias=True tensor path reproduces: a
// separable triangle filter whose support widens by the scale factor when shrinking (the
// antialiased downscale), coefficients normalised in float64 and then fixed to 22 fractional
// bits, a horizontal pass into an 8-bit intermediate, then a vertical pass, each rounding to
// nearest and clamping to 0…255. Integer arithmetic after the coefficients makes it exact on
// every machine.

const (
	precisionBits = 32 - 8 - 2
	half          = 1 << (precisionBits - 1)
)

// coeffs are one axis's filter: output i reads in[start[i] : start[i]+taps] weighted by
// k[i*taps : (i+1)*taps]. Every output has the same number of taps (zero weights pad the
// shorter ones), so the passes run one unrolled loop per row.
type coeffs struct {
	start, n []int32
	k        []int32
	ksize    int
	taps     int
	dbl      []float64
	kx       []int32 // k expanded for hrow3AVX2 (pairWeights)
}

// compute fills c for resizing the inSize samples of [in0, in1) to outSize samples, keeping
// only outputs [from, from+count). With mirror the outputs are stored right to left, which
// flips the result horizontally at no cost.
func (c *coeffs) compute(inSize int, in0, in1 float64, outSize, from, count int, mirror bool) {
	scale := (in1 - in0) / float64(outSize)
	filterscale := max(scale, 1)
	support := filterscale // the triangle filter's support is 1
	ss := 1 / filterscale
	c.ksize = int(math.Ceil(support))*2 + 1
	c.start = grow(c.start, count)
	c.n = grow(c.n, count)
	c.k = grow(c.k, count*c.ksize)
	c.dbl = grow(c.dbl, c.ksize)
	for i := range count {
		xx := from + i
		slot := i
		if mirror {
			slot = count - 1 - i
		}
		center := in0 + float64((float64(xx)+0.5)*scale)
		xmin := int(center - support + 0.5)
		if xmin < 0 {
			xmin = 0
		}
		xmax := int(center + support + 0.5)
		if xmax > inSize {
			xmax = inSize
		}
		xmax -= xmin
		ww := 0.0
		for x := range xmax {
			w := triangle(float64((float64(x+xmin) - center + 0.5) * ss))
			c.dbl[x] = w
			ww += w
		}
		k := c.k[slot*c.ksize : (slot+1)*c.ksize]
		for x := range k {
			if x >= xmax {
				k[x] = 0
				continue
			}
			w := c.dbl[x]
			if ww != 0 {
				w /= ww
			}
			if w < 0 {
				k[x] = int32(-0.5 + float64(w*(1<<precisionBits)))
			} else {
				k[x] = int32(0.5 + float64(w*(1<<precisionBits)))
			}
		}
		c.start[slot] = int32(xmin)
		c.n[slot] = int32(xmax)
	}
	c.uniform(inSize, count)
}

// uniform drops zero weights at both ends of every output's taps, then pads them with zero
// weights to the same count, moving the start left where the padding would run past the
// input, and packs k to that stride. The sums are unchanged.
func (c *coeffs) uniform(inSize, count int) {
	taps := 1
	for i := range count {
		k := c.k[i*c.ksize : i*c.ksize+int(c.n[i])]
		for len(k) > 1 && k[0] == 0 {
			k = k[1:]
			c.start[i]++
		}
		for len(k) > 1 && k[len(k)-1] == 0 {
			k = k[:len(k)-1]
		}
		copy(c.k[i*c.ksize:], k)
		c.n[i] = int32(len(k))
		taps = max(taps, len(k))
	}
	for i := range count {
		n, start := int(c.n[i]), int(c.start[i])
		shift := max(0, start+taps-inSize)
		src := c.k[i*c.ksize : i*c.ksize+n]
		dst := c.k[i*taps : (i+1)*taps] // i*taps ≤ i*ksize: packing forward never overwrites unread weights
		copy(dst[shift:], src)
		clear(dst[:shift])
		clear(dst[shift+n:])
		c.start[i] = int32(start - shift)
		c.n[i] = int32(taps)
	}
	c.taps = taps
}

func triangle(x float64) float64 {
	if x < 0 {
		x = -x
	}
	if x < 1 {
		return 1 - x
	}
	return 0
}

// clip8 is Pillow's clip8, v / 2²² clamped to 0…255, for the bilinear filter whose weights
// are never negative (so v ≥ 0 and only the upper clamp can act).
func clip8(v int32) uint8 {
	return uint8(min(v>>precisionBits, 255))
}

// resizeJob describes one call of resample: the box of src (top, left, bh×bw) resized to
// fullH×fullW, of which the window starting at (oy, ox) of size outH×outW is kept.
type resizeJob struct {
	top, left, bh, bw int
	fullH, fullW      int
	oy, ox            int
	outH, outW        int
	flip              bool
}

// resample writes the job's window into dst (outH×outW×ch).
func (a *Augmenter) resample(dst []uint8, src []uint8, srcW, ch int, j resizeJob) {
	srcStride := srcW * ch
	rowLen := j.outW * ch
	needH := j.bw != j.fullW || j.flip
	needV := j.bh != j.fullH

	// Rows of the box the vertical pass reads, relative to the box.
	rowFirst, rowCount := j.oy, j.outH
	if needV {
		a.vc.compute(j.bh, 0, float64(j.bh), j.fullH, j.oy, j.outH, false)
		rowFirst = int(a.vc.start[0])
		last := int(a.vc.start[j.outH-1]) + a.vc.taps
		rowCount = last - rowFirst
	}

	// vsrc[voff + r*vstride] is row rowFirst+r of the horizontally resampled box.
	var vsrc []uint8
	var voff, vstride int
	if needH {
		a.hc.compute(j.bw, 0, float64(j.bw), j.fullW, j.ox, j.outW, j.flip)
		out := dst
		if needV {
			a.tmp = grow(a.tmp, rowCount*rowLen)
			out = a.tmp
		}
		hpass(out, rowLen, src, srcStride, (j.top+rowFirst)*srcStride+j.left*ch, rowCount, j.outW, ch, &a.hc)
		if !needV {
			return
		}
		vsrc, voff, vstride = a.tmp, 0, rowLen
	} else {
		vsrc, voff, vstride = src, (j.top+rowFirst)*srcStride+(j.left+j.ox)*ch, srcStride
	}
	if !needV {
		for y := range j.outH {
			copy(dst[y*rowLen:(y+1)*rowLen], vsrc[voff+y*vstride:])
		}
		return
	}
	a.acc = grow(a.acc, rowLen)
	vpass(dst, rowLen, j.outH, vsrc, voff-rowFirst*vstride, vstride, &a.vc, a.acc)
}

// pairWeights returns the first outW outputs' weights as hrow3AVX2 reads them: for output
// pair p and tap t, eight int32s at (p·taps + t)·8, the even output's weight four times, then
// the odd one's.
func (c *coeffs) pairWeights(outW int) []int32 {
	pairs, taps := outW/2, c.taps
	c.kx = grow(c.kx, pairs*taps*8)
	for p := range pairs {
		for t := range taps {
			even, odd := c.k[2*p*taps+t], c.k[(2*p+1)*taps+t]
			x := c.kx[(p*taps+t)*8:][:8]
			x[0], x[1], x[2], x[3] = even, even, even, even
			x[4], x[5], x[6], x[7] = odd, odd, odd, odd
		}
	}
	return c.kx
}

// hpass resamples rows rows of src, starting at element off, into dst.
func hpass(dst []uint8, dstStride int, src []uint8, srcStride, off, rows, outW, ch int, c *coeffs) {
	start := c.start[:outW]
	k := c.k[:outW*c.taps]
	var kx []int32
	// The vector loop reads one byte past a row's last source pixel; rows without that byte
	// (the last of src, when the box reaches its end) take the Go loop.
	readEnd := 0
	if ch == 3 && hasVectorLoops && outW >= 2 {
		kx = c.pairWeights(outW)
		readEnd = (int(max(start[0], start[outW-1]))+c.taps)*3 + 1
	}
	for y := range rows {
		srow := src[off+y*srcStride:]
		drow := dst[y*dstStride : y*dstStride+outW*ch]
		switch {
		case ch != 3:
			hrow(drow, srow, start, k, c.taps)
		case kx != nil && readEnd <= len(srow):
			pairs := outW / 2
			hrow3AVX2(&drow[0], &srow[0], &start[0], &kx[0], pairs, c.taps)
			if outW%2 == 1 {
				hrow3(drow[2*pairs*3:], srow, start[2*pairs:], k[2*pairs*c.taps:], c.taps)
			}
		default:
			hrow3(drow, srow, start, k, c.taps)
		}
	}
}

// hrow resamples one row of a one-channel image.
func hrow(d, src []uint8, start, k []int32, taps int) {
	for x, st := range start {
		s := src[st : int(st)+taps]
		w := k[x*taps : (x+1)*taps]
		s = s[:len(w)]
		v := int32(half)
		for t, wt := range w {
			v += int32(s[t]) * wt
		}
		d[x] = clip8(v)
	}
}

// hrow3 resamples one row of an RGB image, unrolled for the usual tap counts (2 when
// enlarging, 3–5 when shrinking by up to 2×).
func hrow3(d, src []uint8, start, k []int32, taps int) {
	switch taps {
	case 2:
		for x, st := range start {
			s := src[int(st)*3:][:6]
			w := k[x*2:][:2]
			d := d[x*3:][:3]
			d[0] = clip8(half + int32(s[0])*w[0] + int32(s[3])*w[1])
			d[1] = clip8(half + int32(s[1])*w[0] + int32(s[4])*w[1])
			d[2] = clip8(half + int32(s[2])*w[0] + int32(s[5])*w[1])
		}
	case 3:
		for x, st := range start {
			s := src[int(st)*3:][:9]
			w := k[x*3:][:3]
			d := d[x*3:][:3]
			d[0] = clip8(half + int32(s[0])*w[0] + int32(s[3])*w[1] + int32(s[6])*w[2])
			d[1] = clip8(half + int32(s[1])*w[0] + int32(s[4])*w[1] + int32(s[7])*w[2])
			d[2] = clip8(half + int32(s[2])*w[0] + int32(s[5])*w[1] + int32(s[8])*w[2])
		}
	case 4:
		for x, st := range start {
			s := src[int(st)*3:][:12]
			w := k[x*4:][:4]
			d := d[x*3:][:3]
			d[0] = clip8(half + int32(s[0])*w[0] + int32(s[3])*w[1] + int32(s[6])*w[2] + int32(s[9])*w[3])
			d[1] = clip8(half + int32(s[1])*w[0] + int32(s[4])*w[1] + int32(s[7])*w[2] + int32(s[10])*w[3])
			d[2] = clip8(half + int32(s[2])*w[0] + int32(s[5])*w[1] + int32(s[8])*w[2] + int32(s[11])*w[3])
		}
	case 5:
		for x, st := range start {
			s := src[int(st)*3:][:15]
			w := k[x*5:][:5]
			d := d[x*3:][:3]
			d[0] = clip8(half + int32(s[0])*w[0] + int32(s[3])*w[1] + int32(s[6])*w[2] + int32(s[9])*w[3] + int32(s[12])*w[4])
			d[1] = clip8(half + int32(s[1])*w[0] + int32(s[4])*w[1] + int32(s[7])*w[2] + int32(s[10])*w[3] + int32(s[13])*w[4])
			d[2] = clip8(half + int32(s[2])*w[0] + int32(s[5])*w[1] + int32(s[8])*w[2] + int32(s[11])*w[3] + int32(s[14])*w[4])
		}
	default:
		for x, st := range start {
			s := src[int(st)*3 : (int(st)+taps)*3]
			w := k[x*taps : (x+1)*taps]
			r, g, b := int32(half), int32(half), int32(half)
			for len(w) > 0 && len(s) >= 3 {
				wt := w[0]
				r += int32(s[0]) * wt
				g += int32(s[1]) * wt
				b += int32(s[2]) * wt
				w, s = w[1:], s[3:]
			}
			d := d[x*3:][:3]
			d[0], d[1], d[2] = clip8(r), clip8(g), clip8(b)
		}
	}
}

// vpass resamples columns: output row y is the weighted sum of rows c.start[y]… of src, where
// row r starts at element base + r*stride. Up to four rows are summed in one sweep; longer
// filters accumulate in acc.
func vpass(dst []uint8, rowLen, outH int, src []uint8, base, stride int, c *coeffs, acc []int32) {
	n := c.taps
	vec := 0
	if hasVectorLoops {
		vec = rowLen &^ 15
	}
	acc = acc[:rowLen-vec]
	for y := range outH {
		k := c.k[y*n : (y+1)*n]
		r0 := base + int(c.start[y])*stride
		d := dst[y*rowLen : (y+1)*rowLen]
		if vec > 0 {
			vrowAVX2(&d[0], &src[r0], stride, vec, &k[0], n)
			if vec == rowLen {
				continue
			}
			d, r0 = d[vec:], r0+vec
		}
		row := func(t int) []uint8 { return src[r0+t*stride : r0+t*stride+len(d)] }
		switch n {
		case 1:
			a := row(0)[:len(d)]
			k0 := k[0]
			for i := range d {
				d[i] = clip8(half + int32(a[i])*k0)
			}
			continue
		case 2:
			a, b := row(0)[:len(d)], row(1)[:len(d)]
			k0, k1 := k[0], k[1]
			for i := range d {
				d[i] = clip8(half + int32(a[i])*k0 + int32(b[i])*k1)
			}
			continue
		case 3:
			a, b, e := row(0)[:len(d)], row(1)[:len(d)], row(2)[:len(d)]
			k0, k1, k2 := k[0], k[1], k[2]
			for i := range d {
				d[i] = clip8(half + int32(a[i])*k0 + int32(b[i])*k1 + int32(e[i])*k2)
			}
			continue
		case 4:
			a, b, e, f := row(0)[:len(d)], row(1)[:len(d)], row(2)[:len(d)], row(3)[:len(d)]
			k0, k1, k2, k3 := k[0], k[1], k[2], k[3]
			for i := range d {
				d[i] = clip8(half + int32(a[i])*k0 + int32(b[i])*k1 + int32(e[i])*k2 + int32(f[i])*k3)
			}
			continue
		}
		for i := range acc {
			acc[i] = half
		}
		t := 0
		for ; t+2 <= n; t += 2 {
			a, b := row(t)[:len(acc)], row(t + 1)[:len(acc)]
			k0, k1 := k[t], k[t+1]
			for i := range acc {
				acc[i] += int32(a[i])*k0 + int32(b[i])*k1
			}
		}
		if t < n {
			a := row(t)[:len(acc)]
			k0 := k[t]
			for i := range acc {
				acc[i] += int32(a[i]) * k0
			}
		}
		d = d[:len(acc)]
		for i, v := range acc {
			d[i] = clip8(v)
		}
	}
}

// grow returns s resliced to n elements, reallocating only when its capacity is short.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
