package kernels

import "fmt"

// ConvShape describes a convolution: input x with Batch × Channels × In (spatial) elements,
// kernel w with (Channels/Groups) × OutChannels × Kernel, output y with Batch × OutChannels ×
// Out. Each tensor's layout is given by its element strides (XStrides, WStrides, YStrides), so
// any axes order is read in place. Fewer than 3 spatial axes are expressed with sizes of 1
// (and strides and dilations of 1, padding 0).
//
// Along spatial axis d, output position o reads input position
// (o·Stride[d] + k·KernelDilation[d] - PadLo[d]) of the input dilated by InputDilation[d]
// (InputDilation-1 zeros inserted between input elements); positions outside it read zero.
// Negative PadLo crops. Output channel o of group g = o/(OutChannels/Groups) reads input
// channels [g·Channels/Groups, (g+1)·Channels/Groups).
type ConvShape struct {
	Batch                 int
	In, Out, Kernel       [3]int
	Channels, OutChannels int
	Groups                int
	Stride, PadLo         [3]int
	InputDilation         [3]int
	KernelDilation        [3]int

	XStrides ConvStrides // Major: batch, Minor: channel
	WStrides ConvStrides // Major: input channel, Minor: output channel
	YStrides ConvStrides // Major: batch, Minor: output channel
}

// ConvStrides are one tensor's element strides: its two non-spatial axes (for x and y: batch
// and channel; for the kernel: input and output channel) and its spatial axes.
type ConvStrides struct {
	Major, Minor int
	Spatial      [3]int
}

// ChannelsLast sets the strides of the channels-last layouts: x [Batch, In..., Channels],
// w [Kernel..., Channels/Groups, OutChannels], y [Batch, Out..., OutChannels].
func (s *ConvShape) ChannelsLast() {
	s.XStrides = ConvStrides{Major: s.In[0] * s.In[1] * s.In[2] * s.Channels, Minor: 1,
		Spatial: [3]int{s.In[1] * s.In[2] * s.Channels, s.In[2] * s.Channels, s.Channels}}
	s.WStrides = ConvStrides{Major: s.OutChannels, Minor: 1,
		Spatial: [3]int{s.Kernel[1] * s.Kernel[2] * s.Channels / s.Groups * s.OutChannels, s.Kernel[2] * s.Channels / s.Groups * s.OutChannels, s.Channels / s.Groups * s.OutChannels}}
	s.YStrides = ConvStrides{Major: s.Out[0] * s.Out[1] * s.Out[2] * s.OutChannels, Minor: 1,
		Spatial: [3]int{s.Out[1] * s.Out[2] * s.OutChannels, s.Out[2] * s.OutChannels, s.OutChannels}}
}

// Validate checks the sizes are consistent (Out is not derived: a caller may crop it).
func (s *ConvShape) Validate() error {
	if s.Batch < 0 || s.Channels <= 0 || s.OutChannels <= 0 || s.Groups <= 0 {
		return fmt.Errorf("conv: batch %d, channels %d, output channels %d, groups %d", s.Batch, s.Channels, s.OutChannels, s.Groups)
	}
	if s.Channels%s.Groups != 0 || s.OutChannels%s.Groups != 0 {
		return fmt.Errorf("conv: %d groups do not divide channels %d and output channels %d", s.Groups, s.Channels, s.OutChannels)
	}
	for d := range 3 {
		if s.In[d] <= 0 || s.Out[d] < 0 || s.Kernel[d] <= 0 || s.Stride[d] <= 0 || s.InputDilation[d] <= 0 || s.KernelDilation[d] <= 0 {
			return fmt.Errorf("conv: spatial axis %d: input %d, output %d, kernel %d, stride %d, dilations %d/%d",
				d, s.In[d], s.Out[d], s.Kernel[d], s.Stride[d], s.InputDilation[d], s.KernelDilation[d])
		}
	}
	return nil
}

// extent is the index one past the last element a strided tensor reaches.
func extent(major, majorN, minor, minorN int, spatial, dims [3]int) int {
	e := 1 + (majorN-1)*major + (minorN-1)*minor
	for d := range 3 {
		e += (dims[d] - 1) * spatial[d]
	}
	return e
}

// Conv computes y = conv(x, w) (see ConvShape) as one packed matrix multiply per group,
// C[rows = output pixels, cols = output channels] = A·W, the rows of A being receptive fields
// packed straight from x (implicit im2col: no im2col matrix is materialised). When x's batch
// axis is its contiguous one (GoMLX's kernel gradient, where the "batch" is the channel axis),
// rows are ordered pixel-major so packing copies contiguous runs. y is overwritten.
func (p *Pool) Conv(s ConvShape, x, w, y []float32) error {
	if err := s.Validate(); err != nil {
		return err
	}
	cg, og := s.Channels/s.Groups, s.OutChannels/s.Groups
	if s.Batch == 0 || s.Out[0]*s.Out[1]*s.Out[2] == 0 {
		return nil
	}
	if n := extent(s.XStrides.Major, s.Batch, s.XStrides.Minor, s.Channels, s.XStrides.Spatial, s.In); len(x) < n {
		return fmt.Errorf("conv: input has %d elements, its strides reach %d", len(x), n)
	}
	if n := extent(s.WStrides.Major, cg, s.WStrides.Minor, s.OutChannels, s.WStrides.Spatial, s.Kernel); len(w) < n {
		return fmt.Errorf("conv: kernel has %d elements, its strides reach %d", len(w), n)
	}
	if n := extent(s.YStrides.Major, s.Batch, s.YStrides.Minor, s.OutChannels, s.YStrides.Spatial, s.Out); len(y) < n {
		return fmt.Errorf("conv: output has %d elements, its strides reach %d", len(y), n)
	}
	if pl, ok := planWinograd(p.kernel, &s); ok && !p.direct {
		p.convWinograd(&s, pl, x, w, y)
		return nil
	}
	if pl, ok := planWinogradGrad(p.kernel, &s); ok && !p.direct {
		p.convWinogradGrad(&s, pl, x, w, y)
		return nil
	}
	pixels := s.Out[0] * s.Out[1] * s.Out[2]
	m := s.Batch * pixels
	kSpatial := s.Kernel[0] * s.Kernel[1] * s.Kernel[2]
	k := kSpatial * cg
	// Rows pixel-major (batch fastest) when the batch axis is contiguous in x.
	pixelMajor := s.XStrides.Major == 1 && s.Batch > 1
	// Depth order: channel fastest, unless rows are pixel-major and the kernel then reads as
	// one strided run with channel slowest (GoMLX's kernel gradient).
	_, slowestRuns := kernelDepthStride(&s, cg, true)
	channelSlowest := pixelMajor && slowestRuns
	rowStep, direct := outputRowStep(&s, pixelMajor)
	var tmp []float32
	ldc := og
	if !direct {
		tmp = make([]float32, m*og)
	}
	mk := p.kernel
	for g := range s.Groups {
		if useIndirect(mk, &s, pixelMajor, direct, cg) {
			b := newKernelSource(&s, w, g*og*s.WStrides.Minor, cg, false)
			p.convIndirect(&s, x, b, y, g*og*s.YStrides.Minor, rowStep, g*cg, cg, og)
			continue
		}
		a := &im2col{s: &s, x: x, cOff: g * cg * s.XStrides.Minor, c: cg, pixelMajor: pixelMajor, channelSlowest: channelSlowest, gather: mk.gather}
		b := newKernelSource(&s, w, g*og*s.WStrides.Minor, cg, channelSlowest)
		if direct {
			p.Gemm(m, og, k, 1, a, b, 0, y[g*og*s.YStrides.Minor:], rowStep)
			continue
		}
		p.Gemm(m, og, k, 1, a, b, 0, tmp, ldc)
		scatterRows(&s, pixelMajor, tmp, og, y, g*og)
	}
	return nil
}

// mergeStride returns the stride of axes (slowest first) read as one flattened index, and false
// when they do not form one strided run. Axes of size 1 are free; no axes at all give 0, true.
func mergeStride(dims, strides []int) (int, bool) {
	last := -1
	for i := range dims {
		if dims[i] == 1 {
			continue
		}
		if last >= 0 && strides[last] != strides[i]*dims[i] {
			return 0, false
		}
		last = i
	}
	if last < 0 {
		return 0, true
	}
	return strides[last], true
}

// kernelDepthStride returns the stride of the kernel's depth index (kernel position and
// channel, channel fastest or slowest) and whether it is one strided run.
func kernelDepthStride(s *ConvShape, cg int, channelSlowest bool) (int, bool) {
	ws := s.WStrides
	k, st := s.Kernel, ws.Spatial
	if channelSlowest {
		return mergeStride([]int{cg, k[0], k[1], k[2]}, []int{ws.Major, st[0], st[1], st[2]})
	}
	return mergeStride([]int{k[0], k[1], k[2], cg}, []int{st[0], st[1], st[2], ws.Major})
}

// outputRowStep returns the stride between consecutive GEMM rows in y, and whether y can be
// written directly (rows at one stride, output channels contiguous).
func outputRowStep(s *ConvShape, pixelMajor bool) (int, bool) {
	ys := s.YStrides
	if ys.Minor != 1 {
		return 0, false
	}
	o := s.Out
	var step int
	var ok bool
	if pixelMajor {
		step, ok = mergeStride([]int{o[0], o[1], o[2], s.Batch}, []int{ys.Spatial[0], ys.Spatial[1], ys.Spatial[2], ys.Major})
	} else {
		step, ok = mergeStride([]int{s.Batch, o[0], o[1], o[2]}, []int{ys.Major, ys.Spatial[0], ys.Spatial[1], ys.Spatial[2]})
	}
	if s.Batch*o[0]*o[1]*o[2] == 1 {
		return s.OutChannels, true
	}
	return step, ok && step >= s.OutChannels
}

// scatterRows copies the m×og GEMM result of one group into y through y's strides.
func scatterRows(s *ConvShape, pixelMajor bool, c []float32, og int, y []float32, oOff int) {
	ys := s.YStrides
	pixels := s.Out[0] * s.Out[1] * s.Out[2]
	for r := range s.Batch * pixels {
		var b, p int
		if pixelMajor {
			p, b = r/s.Batch, r%s.Batch
		} else {
			b, p = r/pixels, r%pixels
		}
		q2 := p % s.Out[2]
		q1 := (p / s.Out[2]) % s.Out[1]
		q0 := p / (s.Out[2] * s.Out[1])
		base := b*ys.Major + q0*ys.Spatial[0] + q1*ys.Spatial[1] + q2*ys.Spatial[2] + oOff*ys.Minor
		for o, v := range c[r*og : r*og+og] {
			y[base+o*ys.Minor] = v
		}
	}
}

// im2col is the receptive-field matrix of a convolution as a PanelSource. Rows are output
// pixels, batch-major ((batch, pixel) row-major) or pixel-major ((pixel, batch)); depth index
// is (kernel position, channel) row-major, or (channel, kernel position) when channelSlowest.
type im2col struct {
	s              *ConvShape
	x              []float32
	cOff           int // element offset of the group's first channel
	c              int // channels per group
	pixelMajor     bool
	channelSlowest bool
	// gather is the micro-kernel's run copier (nil: copy in Go).
	gather func(dst *float32, w int, x *float32, offs *int64, kc, n int)
}

// depthIndex splits a depth index into its channel and the kernel offsets (already multiplied
// by the kernel dilation).
func (a *im2col) depthIndex(p int) (c int, k [3]int) {
	s := a.s
	ks := s.Kernel[0] * s.Kernel[1] * s.Kernel[2]
	var kpos int
	if a.channelSlowest {
		c, kpos = p/ks, p%ks
	} else {
		kpos, c = p/a.c, p%a.c
	}
	k2 := kpos % s.Kernel[2]
	k1 := (kpos / s.Kernel[2]) % s.Kernel[1]
	k0 := kpos / (s.Kernel[2] * s.Kernel[1])
	return c, [3]int{k0 * s.KernelDilation[0], k1 * s.KernelDilation[1], k2 * s.KernelDilation[2]}
}

// spatialOffset returns the element offset of input position base+k, false where that is
// padding or a dilation hole.
func (a *im2col) spatialOffset(base, k [3]int) (int, bool) {
	s := a.s
	off := 0
	for d := range 3 {
		pos := base[d] + k[d]
		if ld := s.InputDilation[d]; ld != 1 {
			if pos < 0 || pos%ld != 0 {
				return 0, false
			}
			pos /= ld
		}
		if pos < 0 || pos >= s.In[d] {
			return 0, false
		}
		off += pos * s.XStrides.Spatial[d]
	}
	return off, true
}

// pixelBase returns the input position (before kernel offsets) of output pixel p.
func (a *im2col) pixelBase(p int) [3]int {
	s := a.s
	q2 := p % s.Out[2]
	q1 := (p / s.Out[2]) % s.Out[1]
	q0 := p / (s.Out[2] * s.Out[1])
	return [3]int{q0*s.Stride[0] - s.PadLo[0], q1*s.Stride[1] - s.PadLo[1], q2*s.Stride[2] - s.PadLo[2]}
}

// Pack implements PanelSource.
func (a *im2col) Pack(dst []float32, r0, rows, p0, kc, w int, scale float32) {
	if a.pixelMajor {
		a.packPixelMajor(dst, r0, rows, p0, kc, w, scale)
		return
	}
	if a.packRowRuns(dst, r0, rows, p0, kc, w, scale) {
		return
	}
	s := a.s
	xs := s.XStrides
	// The depth range cut at kernel positions: runs of channels with one kernel offset.
	type segment struct {
		p, c0, n int
		k        [3]int
	}
	var segs [64]segment
	segList := segs[:0]
	for p := p0; p < p0+kc; {
		c0, k := a.depthIndex(p)
		n := min(a.c-c0, p0+kc-p)
		segList = append(segList, segment{p: p - p0, c0: c0, n: n, k: k})
		p += n
	}
	pixels := s.Out[0] * s.Out[1] * s.Out[2]
	panels := (rows + w - 1) / w
	for pi := range panels {
		panel := dst[pi*kc*w : (pi+1)*kc*w]
		for i := range w {
			r := r0 + pi*w + i
			if r >= r0+rows {
				for p := range kc {
					panel[p*w+i] = 0
				}
				continue
			}
			b, px := r/pixels, r%pixels
			base := a.pixelBase(px)
			rowOff := b*xs.Major + a.cOff
			for _, sg := range segList {
				out := panel[sg.p*w+i:]
				off, ok := a.spatialOffset(base, sg.k)
				if !ok {
					for j := range sg.n {
						out[j*w] = 0
					}
					continue
				}
				start := rowOff + off + sg.c0*xs.Minor
				if xs.Minor == 1 {
					src := a.x[start : start+sg.n]
					if scale == 1 {
						for j, v := range src {
							out[j*w] = v
						}
					} else {
						for j, v := range src {
							out[j*w] = v * scale
						}
					}
					continue
				}
				for j := range sg.n {
					out[j*w] = a.x[start+j*xs.Minor] * scale
				}
			}
		}
	}
}

// packRowRuns packs batch-major rows when all the channels of neighbouring pixels are contiguous
// in x (channels last, one group) and the depth block covers whole kernel rows: then the k2
// taps of one kernel row read one contiguous run of k2·channels floats, copied at once (the
// first layer of an image model has 3 channels: 49 runs of 3 become 7 runs of 21). It reports
// false when those conditions do not hold.
func (a *im2col) packRowRuns(dst []float32, r0, rows, p0, kc, w int, scale float32) bool {
	s := a.s
	xs := s.XStrides
	rowLen := s.Kernel[2] * a.c
	if a.c > 8 || xs.Minor != 1 || xs.Spatial[2] != a.c || a.c != s.Channels || s.KernelDilation[2] != 1 ||
		s.InputDilation != [3]int{1, 1, 1} || p0%rowLen != 0 || kc%rowLen != 0 {
		return false
	}
	nRows := kc / rowLen // kernel rows (k0, k1) in this depth block
	pixels := s.Out[0] * s.Out[1] * s.Out[2]
	panels := (rows + w - 1) / w
	for pi := range panels {
		panel := dst[pi*kc*w : (pi+1)*kc*w]
		for i := range w {
			r := r0 + pi*w + i
			if r >= r0+rows {
				for p := range kc {
					panel[p*w+i] = 0
				}
				continue
			}
			b, px := r/pixels, r%pixels
			base := a.pixelBase(px)
			for kr := range nRows {
				kpos := (p0/rowLen + kr)
				k1 := kpos % s.Kernel[1]
				k0 := kpos / s.Kernel[1]
				out := panel[kr*rowLen*w+i:]
				p := base[0] + k0*s.KernelDilation[0]
				q := base[1] + k1*s.KernelDilation[1]
				if p < 0 || p >= s.In[0] || q < 0 || q >= s.In[1] {
					for j := range rowLen {
						out[j*w] = 0
					}
					continue
				}
				// Taps k2 in [lo, hi) land inside the row.
				// (Padding wider than the kernel can put every tap before the row.)
				lo, hi := min(s.Kernel[2], max(0, -base[2])), min(s.Kernel[2], s.In[2]-base[2])
				for j := range lo * a.c {
					out[j*w] = 0
				}
				if hi > lo {
					start := b*xs.Major + p*xs.Spatial[0] + q*xs.Spatial[1] + (base[2]+lo)*xs.Spatial[2]
					src := a.x[start : start+(hi-lo)*a.c]
					o := out[lo*a.c*w:]
					for j, v := range src {
						o[j*w] = v * scale
					}
				}
				for j := max(hi, lo) * a.c; j < rowLen; j++ {
					out[j*w] = 0
				}
			}
		}
	}
	return true
}

// packPixelMajor packs rows (pixel, batch): runs of consecutive batch indices share one input
// position, so each depth index copies a run of the (contiguous) batch axis. The runs' source
// offsets are computed in Go and copied by the micro-kernel's gather routine when it has one.
func (a *im2col) packPixelMajor(dst []float32, r0, rows, p0, kc, w int, scale float32) {
	s := a.s
	xs := s.XStrides
	dilated := s.InputDilation != [3]int{1, 1, 1}
	// Per depth index: element offset of its channel and kernel position, and the kernel
	// offsets for the bounds checks.
	elemOffBuf, koffsBuf, offsBuf := intScratch.get(kc), koffScratch.get(kc), int64Scratch.get(kc)
	defer func() {
		intScratch.put(elemOffBuf)
		koffScratch.put(koffsBuf)
		int64Scratch.put(offsBuf)
	}()
	elemOff, koffs, offs := *elemOffBuf, *koffsBuf, *offsBuf
	for p := range kc {
		c, k := a.depthIndex(p0 + p)
		koffs[p] = k
		elemOff[p] = a.cOff + c*xs.Minor + k[0]*xs.Spatial[0] + k[1]*xs.Spatial[1] + k[2]*xs.Spatial[2]
	}
	gather := a.gather
	if xs.Major != 1 || scale != 1 {
		gather = nil
	}
	in := s.In
	lastPx := -1
	panels := (rows + w - 1) / w
	for pi := range panels {
		panel := dst[pi*kc*w : (pi+1)*kc*w]
		first := r0 + pi*w
		last := min(first+w, r0+rows)
		if last-first < w {
			for p := range kc {
				clear(panel[p*w+last-first : p*w+w])
			}
		}
		for r := first; r < last; {
			px, b := r/s.Batch, r%s.Batch
			n := min(s.Batch-b, last-r) // run of rows with this pixel
			i0 := r - first
			if px != lastPx {
				// Source offsets of this pixel's depth indices for batch index 0; a run adds
				// its first batch index.
				lastPx = px
				base := a.pixelBase(px)
				pixOff := base[0]*xs.Spatial[0] + base[1]*xs.Spatial[1] + base[2]*xs.Spatial[2]
				for p := range kc {
					if dilated {
						off, ok := a.spatialOffset(base, koffs[p])
						if !ok {
							offs[p] = -1
							continue
						}
						offs[p] = int64(off + elemOff[p] - (koffs[p][0]*xs.Spatial[0] + koffs[p][1]*xs.Spatial[1] + koffs[p][2]*xs.Spatial[2]))
						continue
					}
					k := &koffs[p]
					if uint(base[0]+k[0]) >= uint(in[0]) || uint(base[1]+k[1]) >= uint(in[1]) || uint(base[2]+k[2]) >= uint(in[2]) {
						offs[p] = -1
						continue
					}
					offs[p] = int64(pixOff + elemOff[p])
				}
			}
			if gather != nil && n <= 16 {
				gather(&panel[i0], w, &a.x[b*xs.Major], &offs[0], kc, n)
				r += n
				continue
			}
			for p := range kc {
				out := panel[p*w+i0 : p*w+i0+n]
				if offs[p] < 0 {
					clear(out)
					continue
				}
				start := int(offs[p]) + b*xs.Major
				if xs.Major == 1 {
					src := a.x[start : start+n]
					if scale == 1 {
						copy(out, src)
						continue
					}
					for j, v := range src {
						out[j] = v * scale
					}
					continue
				}
				for j := range out {
					out[j] = a.x[start+j*xs.Major] * scale
				}
			}
			r += n
		}
	}
}

// newKernelSource reads the kernel as the GEMM's right operand: rows are the group's output
// channels, depth follows the im2col's order. A kernel whose depth is one strided run (HWIO,
// or GoMLX's kernel gradient read channel-slowest) is read as Strided; others are gathered.
func newKernelSource(s *ConvShape, w []float32, oOff, cg int, channelSlowest bool) PanelSource {
	if stride, ok := kernelDepthStride(s, cg, channelSlowest); ok {
		return Strided{Data: w, Off: oOff, RowStride: s.WStrides.Minor, DepthStride: stride}
	}
	return &kernelGather{s: s, w: w, oOff: oOff, cg: cg, channelSlowest: channelSlowest}
}

// kernelGather packs a kernel of any layout element by element (kernels are small).
type kernelGather struct {
	s              *ConvShape
	w              []float32
	oOff, cg       int
	channelSlowest bool
}

func (kg *kernelGather) Pack(dst []float32, r0, rows, p0, kc, w int, scale float32) {
	s := kg.s
	ws := s.WStrides
	ks := s.Kernel[0] * s.Kernel[1] * s.Kernel[2]
	panels := (rows + w - 1) / w
	for p := range kc {
		d := p0 + p
		var c, kpos int
		if kg.channelSlowest {
			c, kpos = d/ks, d%ks
		} else {
			kpos, c = d/kg.cg, d%kg.cg
		}
		k2 := kpos % s.Kernel[2]
		k1 := (kpos / s.Kernel[2]) % s.Kernel[1]
		k0 := kpos / (s.Kernel[2] * s.Kernel[1])
		base := kg.oOff + c*ws.Major + k0*ws.Spatial[0] + k1*ws.Spatial[1] + k2*ws.Spatial[2]
		for pi := range panels {
			out := dst[pi*kc*w+p*w : pi*kc*w+p*w+w]
			if ws.Minor == 1 && scale == 1 {
				// Output channels contiguous (a channels-last output gradient read as the kernel
				// of GoMLX's kernel gradient, which can be as large as the activations): copy.
				r := r0 + pi*w
				n := copy(out[:min(w, r0+rows-r)], kg.w[base+r:])
				clear(out[n:])
				continue
			}
			for i := range w {
				r := r0 + pi*w + i
				if r >= r0+rows {
					out[i] = 0
					continue
				}
				out[i] = kg.w[base+r*ws.Minor] * scale
			}
		}
	}
}
