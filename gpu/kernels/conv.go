package kernels

import "fmt"

// ConvShape describes a convolution in the channels-last layout Conv computes: input x
// [Batch, In[0], In[1], In[2], Channels], kernel w [Kernel[0], Kernel[1], Kernel[2],
// Channels/Groups, OutChannels], output y [Batch, Out[0], Out[1], Out[2], OutChannels]. Fewer
// spatial axes are expressed with sizes of 1 (and strides and dilations of 1, padding 0).
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
}

// Validate checks the sizes are consistent (Out is not derived: a caller may crop it).
func (s ConvShape) Validate() error {
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

func (s ConvShape) inputSize() int  { return s.Batch * s.In[0] * s.In[1] * s.In[2] * s.Channels }
func (s ConvShape) outputSize() int { return s.Batch * s.Out[0] * s.Out[1] * s.Out[2] * s.OutChannels }
func (s ConvShape) kernelSize() int {
	return s.Kernel[0] * s.Kernel[1] * s.Kernel[2] * s.Channels / s.Groups * s.OutChannels
}

// Conv computes y = conv(x, w) for channels-last tensors (see ConvShape) as one packed matrix
// multiply per group, C[rows = output pixels, cols = output channels] = A·W, where the rows of
// A are the receptive fields, packed straight from x (implicit im2col: no im2col matrix is
// materialised). y is overwritten.
func (p *Pool) Conv(s ConvShape, x, w, y []float32) error {
	if err := s.Validate(); err != nil {
		return err
	}
	if len(x) < s.inputSize() || len(w) < s.kernelSize() || len(y) < s.outputSize() {
		return fmt.Errorf("conv: slices of %d/%d/%d elements for input/kernel/output of %d/%d/%d",
			len(x), len(w), len(y), s.inputSize(), s.kernelSize(), s.outputSize())
	}
	m := s.Batch * s.Out[0] * s.Out[1] * s.Out[2]
	cg, og := s.Channels/s.Groups, s.OutChannels/s.Groups
	k := s.Kernel[0] * s.Kernel[1] * s.Kernel[2] * cg
	for g := range s.Groups {
		a := &im2col{s: s, x: x, cOff: g * cg, c: cg}
		b := Strided{Data: w, Off: g * og, RowStride: 1, DepthStride: s.OutChannels}
		p.Gemm(m, og, k, 1, a, b, 0, y[g*og:], s.OutChannels)
	}
	return nil
}

// im2col is the receptive-field matrix of a channels-last convolution as a PanelSource: row r
// is output pixel r (batch, then spatial axes, row-major), depth index p is
// ((k0·K1 + k1)·K2 + k2)·c + channel, matching the kernel's row-major layout.
type im2col struct {
	s    ConvShape
	x    []float32
	cOff int // first input channel of the group
	c    int // channels per group
}

// segment is a run of depth indices with one kernel offset: channels [c0, c0+n) of kernel
// position (k0, k1, k2), starting at depth index p (relative to the packed block).
type segment struct {
	p, c0, n int
	k        [3]int // kernel offsets already multiplied by the kernel dilation
}

// Pack implements PanelSource.
func (a *im2col) Pack(dst []float32, r0, rows, p0, kc, w int, scale float32) {
	s := &a.s
	// The depth range, cut at kernel positions.
	var segs [64]segment
	segList := segs[:0]
	for p := p0; p < p0+kc; {
		kpos, c0 := p/a.c, p%a.c
		n := min(a.c-c0, p0+kc-p)
		k2 := kpos % s.Kernel[2]
		k1 := (kpos / s.Kernel[2]) % s.Kernel[1]
		k0 := kpos / (s.Kernel[2] * s.Kernel[1])
		segList = append(segList, segment{p: p - p0, c0: c0, n: n,
			k: [3]int{k0 * s.KernelDilation[0], k1 * s.KernelDilation[1], k2 * s.KernelDilation[2]}})
		p += n
	}
	ctot := s.Channels
	o0, o1, o2 := s.Out[0], s.Out[1], s.Out[2]
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
			q2 := r % o2
			q1 := (r / o2) % o1
			q0 := (r / (o2 * o1)) % o0
			b := r / (o2 * o1 * o0)
			base := [3]int{q0*s.Stride[0] - s.PadLo[0], q1*s.Stride[1] - s.PadLo[1], q2*s.Stride[2] - s.PadLo[2]}
			for _, sg := range segList {
				off, ok := a.inputOffset(b, base, sg.k)
				out := panel[sg.p*w+i:]
				if !ok {
					for j := range sg.n {
						out[j*w] = 0
					}
					continue
				}
				src := a.x[off*ctot+a.cOff+sg.c0:][:sg.n]
				if scale == 1 {
					for j, v := range src {
						out[j*w] = v
					}
				} else {
					for j, v := range src {
						out[j*w] = v * scale
					}
				}
			}
		}
	}
}

// inputOffset returns the pixel index (batch and spatial, row-major) that output base position
// base plus kernel offset k reads, and false where that is padding or a dilation hole.
func (a *im2col) inputOffset(b int, base, k [3]int) (int, bool) {
	s := &a.s
	off := b
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
		off = off*s.In[d] + pos
	}
	return off, true
}
