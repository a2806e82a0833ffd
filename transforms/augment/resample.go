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

// coeffs are one axis's filter: output i reads in[start[i] : start[i]+n[i]] weighted by
// k[i*ksize : i*ksize+n[i]].
type coeffs struct {
	start, n []int32
	k        []int32
	ksize    int
	dbl      []float64
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

func clip8(v int32) uint8 {
	if v >= 255<<precisionBits {
		return 255
	}
	if v <= 0 {
		return 0
	}
	return uint8(v >> precisionBits)
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
		last := int(a.vc.start[j.outH-1] + a.vc.n[j.outH-1])
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

// hpass resamples rows rows of src, starting at element off, into dst.
func hpass(dst []uint8, dstStride int, src []uint8, srcStride, off, rows, outW, ch int, c *coeffs) {
	ks := c.ksize
	for y := range rows {
		srow := src[off+y*srcStride:]
		drow := dst[y*dstStride : y*dstStride+outW*ch]
		if ch == 3 {
			for x := range outW {
				n := int(c.n[x])
				k := c.k[x*ks : x*ks+n]
				s := srow[int(c.start[x])*3 : (int(c.start[x])+n)*3]
				r, g, b := int32(half), int32(half), int32(half)
				for t, w := range k {
					p := s[t*3 : t*3+3 : t*3+3]
					r += int32(p[0]) * w
					g += int32(p[1]) * w
					b += int32(p[2]) * w
				}
				d := drow[x*3 : x*3+3 : x*3+3]
				d[0], d[1], d[2] = clip8(r), clip8(g), clip8(b)
			}
			continue
		}
		for x := range outW {
			n := int(c.n[x])
			k := c.k[x*ks : x*ks+n]
			s := srow[int(c.start[x]) : int(c.start[x])+n]
			v := int32(half)
			for t, w := range k {
				v += int32(s[t]) * w
			}
			drow[x] = clip8(v)
		}
	}
}

// vpass resamples columns: output row y is the weighted sum of rows c.start[y]… of src, where
// row r starts at element base + r*stride.
func vpass(dst []uint8, rowLen, outH int, src []uint8, base, stride int, c *coeffs, acc []int32) {
	acc = acc[:rowLen]
	for y := range outH {
		n := int(c.n[y])
		k := c.k[y*c.ksize : y*c.ksize+n]
		r0 := base + int(c.start[y])*stride
		for i := range acc {
			acc[i] = half
		}
		for t, w := range k {
			row := src[r0+t*stride : r0+t*stride+rowLen]
			for i, v := range row {
				acc[i] += int32(v) * w
			}
		}
		drow := dst[y*rowLen : (y+1)*rowLen]
		for i, v := range acc {
			drow[i] = clip8(v)
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
