package kernels

import "unsafe"

// The indirect convolution (Dukhan, "The Indirect Convolution Algorithm", 2019): instead of
// packing receptive fields, the micro-kernel reads each output pixel's input rows in place,
// through a table of offsets (padding points at a row of zeros). Only the kernel is packed.
// It applies to batch-major convolutions whose channels are contiguous in x and whose output
// is written directly: the forward convolution and GoMLX's input gradient.

// indirectMaxDepth bounds the depth of one packed kernel block (segments × channels), so a
// block of B panels stays in L2.
const indirectMaxDepth = 768

// indirectChannels is the most channels one segment covers.
const indirectChannels = 256

// useIndirect reports whether Conv can run this group layout with the indirect kernel.
func useIndirect(mk *microKernel, s *ConvShape, pixelMajor, direct bool, cg int) bool {
	return mk.indirect != nil && !pixelMajor && direct && s.XStrides.Minor == 1 && cg >= 16
}

// convIndirect computes one group (input channels from cOff, output columns from yOff) into
// y rows with stride rowStep, in parallel over output pixels. With input dilation (GoMLX's
// input gradient of a strided convolution) the output pixels are split by phase (position
// modulo the dilation) and each phase runs only the kernel taps that land on input values,
// skipping the multiplications by the inserted zeros.
func (p *Pool) convIndirect(s *ConvShape, x []float32, w PanelSource, y []float32, yOff, rowStep, cOff, cg, og int) {
	mk := p.kernel
	m := s.Batch * s.Out[0] * s.Out[1] * s.Out[2]
	ks := s.Kernel[0] * s.Kernel[1] * s.Kernel[2]
	var jobs []indirectJob
	var phases []phase
	if s.InputDilation != [3]int{1, 1, 1} {
		rowsBuf := phaseRows.get(m) // every output pixel is in one phase
		defer phaseRows.put(rowsBuf)
		phases = phaseTaps(s, *rowsBuf)
	}
	if phases != nil {
		for _, ph := range phases {
			jobs = append(jobs, indirectJob{rows: ph.rows, taps: ph.taps})
		}
	} else {
		all := make([]int, ks)
		for k := range all {
			all[k] = k
		}
		jobs = []indirectJob{{rows: nil, taps: all, n: m}}
	}
	// Parallel over row ranges of every job, cut in multiples of the tile height.
	type part struct{ job, lo, hi int }
	var parts []part
	threads := 1
	if p.threads > 1 && m*og*cg*ks >= minParallelFlops {
		threads = p.threads
	}
	for j := range jobs {
		n := jobs[j].n
		if jobs[j].rows != nil {
			n = len(jobs[j].rows)
		}
		pts := splitPoints(n, threads, mk.mr)
		for t := range len(pts) - 1 {
			parts = append(parts, part{j, pts[t], pts[t+1]})
		}
	}
	p.ParallelFor(len(parts), func(t int) {
		pt := parts[t]
		convIndirectRows(mk, s, x, w, y, yOff, rowStep, cOff, cg, og, jobs[pt.job], pt.lo, pt.hi)
	})
}

// indirectJob is a set of output pixels (rows, batch-major indices; nil: 0..n-1) that read the
// same kernel taps.
type indirectJob struct {
	rows []int
	n    int
	taps []int
}

type phase struct {
	rows []int
	taps []int
}

// phaseTaps splits a stride-1 convolution over an input-dilated input into phases: output
// pixels whose position is congruent modulo the dilation read real input values through the
// same kernel taps. It returns nil without input dilation (or with strides, where phases are
// not worth it). The phases' rows are slices of buf, which holds one int per output pixel.
func phaseTaps(s *ConvShape, buf []int) []phase {
	var ld [3]int
	dilated := false
	for d := range 3 {
		ld[d] = s.InputDilation[d]
		if ld[d] > 1 {
			dilated = true
			if s.Stride[d] != 1 {
				return nil
			}
		}
	}
	if !dilated {
		return nil
	}
	var phases []phase
	for p0 := range ld[0] {
		for p1 := range ld[1] {
			for p2 := range ld[2] {
				ph := [3]int{p0, p1, p2}
				var taps []int
				for k0 := range s.Kernel[0] {
					for k1 := range s.Kernel[1] {
						for k2 := range s.Kernel[2] {
							k := [3]int{k0, k1, k2}
							ok := true
							for d := range 3 {
								q := ph[d] + k[d]*s.KernelDilation[d] - s.PadLo[d]
								if ((q%ld[d])+ld[d])%ld[d] != 0 {
									ok = false
								}
							}
							if ok {
								taps = append(taps, (k0*s.Kernel[1]+k1)*s.Kernel[2]+k2)
							}
						}
					}
				}
				rows := buf[:0:len(buf)]
				pixels := s.Out[0] * s.Out[1] * s.Out[2]
				for b := range s.Batch {
					for q0 := p0; q0 < s.Out[0]; q0 += ld[0] {
						for q1 := p1; q1 < s.Out[1]; q1 += ld[1] {
							for q2 := p2; q2 < s.Out[2]; q2 += ld[2] {
								rows = append(rows, b*pixels+(q0*s.Out[1]+q1)*s.Out[2]+q2)
							}
						}
					}
				}
				if len(rows) > 0 {
					phases = append(phases, phase{rows: rows, taps: taps})
					buf = buf[len(rows):]
				}
			}
		}
	}
	return phases
}

// rowSpacing returns d when the n output pixels from index i of rows (nil: consecutive pixels)
// are evenly spaced, d pixels apart, and 0 otherwise. The micro-kernel then writes their tile
// in place with a row stride of d rows: a phase of an input-dilated convolution (a strided
// convolution's input gradient) takes every other pixel of an output row.
func rowSpacing(rows []int, i, n int) int {
	if rows == nil {
		return 1
	}
	d := rows[i+1] - rows[i]
	if d <= 0 {
		return 0
	}
	for k := i + 2; k < i+n; k++ {
		if rows[k]-rows[k-1] != d {
			return 0
		}
	}
	return d
}

// convIndirectRows computes rows [lo, hi) of a job on the calling goroutine.
func convIndirectRows(mk *microKernel, s *ConvShape, x []float32, w PanelSource, y []float32, yOff, rowStep, cOff, cg, og int, job indirectJob, lo, hi int) {
	if lo >= hi {
		return
	}
	row := func(i int) int {
		if job.rows == nil {
			return i
		}
		return job.rows[i]
	}
	mr, nr := mk.mr, mk.nr
	for i := lo; i < hi; i++ {
		r := row(i)
		clear(y[yOff+r*rowStep : yOff+r*rowStep+og])
	}
	taps := job.taps
	if len(taps) == 0 {
		return
	}
	a := &im2col{s: s, x: x, cOff: cOff, c: cg}
	kOffsBuf := koffScratch.get(len(taps))
	defer koffScratch.put(kOffsBuf)
	kOffs := *kOffsBuf
	for i, kp := range taps {
		_, kOffs[i] = a.depthIndex(kp * cg)
	}
	pixels := s.Out[0] * s.Out[1] * s.Out[2]
	nch := (cg + indirectChannels - 1) / indirectChannels
	xBase := unsafe.Pointer(&x[0])
	maxSeg := max(1, indirectMaxDepth/min(cg, indirectChannels))
	nZeros, nTile, nBp := indirectChannels+1, mr*nr, (og+nr-1)/nr*nr*maxSeg*min(cg, indirectChannels)+16
	f32Buf := floats.get(nZeros + nTile + nBp)
	defer floats.put(f32Buf)
	zeros, tile, bp := f32Buf[:nZeros], f32Buf[nZeros:nZeros+nTile], f32Buf[nZeros+nTile:]
	clear(zeros)
	tiles := (min(hi-lo, blockM) + mr - 1) / mr
	offsBuf := int64Scratch.get(tiles * maxSeg * mr)
	defer int64Scratch.put(offsBuf)
	offs := *offsBuf
	for ci := range nch {
		c0, c1 := ci*cg/nch, (ci+1)*cg/nch
		kc := c1 - c0
		zeroEnd := unsafe.Pointer(&zeros[kc])
		for t0 := 0; t0 < len(taps); t0 += maxSeg {
			nseg := min(maxSeg, len(taps)-t0)
			depth := nseg * kc
			// Pack the kernel block: per panel of nr output channels, nseg segments of kc rows.
			for jr := 0; jr < og; jr += nr {
				panel := bp[(jr/nr)*depth*nr:]
				for sg := range nseg {
					w.Pack(panel[sg*kc*nr:], jr, min(nr, og-jr), taps[t0+sg]*cg+c0, kc, nr, 1)
				}
			}
			for ic := lo; ic < hi; ic += blockM {
				mc := min(blockM, hi-ic)
				// Offsets (of each row's segment end) for every tile of mr rows.
				for i := range (mc + mr - 1) / mr * mr {
					t, k := i/mr, i%mr
					if i >= mc {
						for sg := range nseg {
							offs[(t*nseg+sg)*mr+k] = -1
						}
						continue
					}
					r := row(ic + i)
					b, px := r/pixels, r%pixels
					base := a.pixelBase(px)
					rowOff := b*s.XStrides.Major + cOff + c0 + kc
					for sg := range nseg {
						off, ok := a.spatialOffset(base, kOffs[t0+sg])
						if ok {
							offs[(t*nseg+sg)*mr+k] = int64(rowOff + off)
						} else {
							offs[(t*nseg+sg)*mr+k] = -1
						}
					}
				}
				for jr := 0; jr < og; jr += nr {
					nv := min(nr, og-jr)
					bPanel := unsafe.Pointer(&bp[(jr/nr)*depth*nr])
					for ir := 0; ir < mc; ir += mr {
						mv := min(mr, mc-ir)
						o := &offs[(ir/mr)*nseg*mr]
						if mv == mr && nv == nr {
							if d := rowSpacing(job.rows, ic+ir, mr); d > 0 {
								ci := yOff + row(ic+ir)*rowStep + jr
								mk.indirect(nseg, kc, o, xBase, zeroEnd, bPanel, unsafe.Pointer(&y[ci]), d*rowStep)
								continue
							}
						}
						clear(tile)
						mk.indirect(nseg, kc, o, xBase, zeroEnd, bPanel, unsafe.Pointer(&tile[0]), nr)
						for i := range mv {
							ci := yOff + row(ic+ir+i)*rowStep + jr
							dst := y[ci : ci+nv]
							for j, v := range tile[i*nr : i*nr+nv] {
								dst[j] += v
							}
						}
					}
				}
			}
		}
	}
}
