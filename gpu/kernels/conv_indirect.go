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
// y rows with stride rowStep, in parallel over output pixels.
func (p *Pool) convIndirect(s *ConvShape, x []float32, w PanelSource, y []float32, yOff, rowStep, cOff, cg, og int) {
	mk := p.kernel
	m := s.Batch * s.Out[0] * s.Out[1] * s.Out[2]
	parts := 1
	if p.threads > 1 && m*og*cg*s.Kernel[0]*s.Kernel[1]*s.Kernel[2] >= minParallelFlops {
		parts = p.threads
	}
	pts := splitPoints(m, parts, mk.mr)
	p.ParallelFor(len(pts)-1, func(t int) {
		convIndirectRows(mk, s, x, w, y, yOff, rowStep, cOff, cg, og, pts[t], pts[t+1])
	})
}

// convIndirectRows computes output rows [lo, hi) of one group on the calling goroutine.
func convIndirectRows(mk *microKernel, s *ConvShape, x []float32, w PanelSource, y []float32, yOff, rowStep, cOff, cg, og, lo, hi int) {
	if lo >= hi {
		return
	}
	mr, nr := mk.mr, mk.nr
	for r := lo; r < hi; r++ {
		clear(y[yOff+r*rowStep : yOff+r*rowStep+og])
	}
	a := &im2col{s: s, x: x, cOff: cOff, c: cg}
	ks := s.Kernel[0] * s.Kernel[1] * s.Kernel[2]
	kOffs := make([][3]int, ks)
	for kp := range ks {
		_, kOffs[kp] = a.depthIndex(kp * cg)
	}
	pixels := s.Out[0] * s.Out[1] * s.Out[2]
	nch := (cg + indirectChannels - 1) / indirectChannels
	zeros := make([]float32, indirectChannels+1)
	zeroEnd := func(kc int) unsafe.Pointer { return unsafe.Pointer(&zeros[kc]) }
	xBase := unsafe.Pointer(&x[0])
	tile := make([]float32, mr*nr)
	maxSeg := max(1, indirectMaxDepth/min(cg, indirectChannels))
	bp := make([]float32, (og+nr-1)/nr*nr*maxSeg*min(cg, indirectChannels)+16)
	tiles := (min(hi-lo, blockM) + mr - 1) / mr
	offs := make([]int64, tiles*maxSeg*mr)
	for ci := range nch {
		c0, c1 := ci*cg/nch, (ci+1)*cg/nch
		kc := c1 - c0
		for k0 := 0; k0 < ks; k0 += maxSeg {
			nseg := min(maxSeg, ks-k0)
			depth := nseg * kc
			// Pack the kernel block: per panel of nr output channels, nseg segments of kc rows.
			for jr := 0; jr < og; jr += nr {
				panel := bp[(jr/nr)*depth*nr:]
				for sg := range nseg {
					w.Pack(panel[sg*kc*nr:], jr, min(nr, og-jr), (k0+sg)*cg+c0, kc, nr, 1)
				}
			}
			for ic := lo; ic < hi; ic += blockM {
				mc := min(blockM, hi-ic)
				// Offsets (of each row's segment end) for every tile of mr rows.
				for r := range (mc + mr - 1) / mr * mr {
					t, i := r/mr, r%mr
					row := ic + r
					if row >= ic+mc {
						for sg := range nseg {
							offs[(t*nseg+sg)*mr+i] = -1
						}
						continue
					}
					b, px := row/pixels, row%pixels
					base := a.pixelBase(px)
					rowOff := b*s.XStrides.Major + cOff + c0 + kc
					for sg := range nseg {
						off, ok := a.spatialOffset(base, kOffs[k0+sg])
						if ok {
							offs[(t*nseg+sg)*mr+i] = int64(rowOff + off)
						} else {
							offs[(t*nseg+sg)*mr+i] = -1
						}
					}
				}
				for jr := 0; jr < og; jr += nr {
					nv := min(nr, og-jr)
					bPanel := unsafe.Pointer(&bp[(jr/nr)*depth*nr])
					for ir := 0; ir < mc; ir += mr {
						mv := min(mr, mc-ir)
						o := &offs[(ir/mr)*nseg*mr]
						ci := yOff + (ic+ir)*rowStep + jr
						if mv == mr && nv == nr {
							mk.indirect(nseg, kc, o, xBase, zeroEnd(kc), bPanel, unsafe.Pointer(&y[ci]), rowStep)
							continue
						}
						clear(tile)
						mk.indirect(nseg, kc, o, xBase, zeroEnd(kc), bPanel, unsafe.Pointer(&tile[0]), nr)
						for i := range mv {
							row := y[ci+i*rowStep : ci+i*rowStep+nv]
							for j, v := range tile[i*nr : i*nr+nv] {
								row[j] += v
							}
						}
					}
				}
			}
		}
	}
}
