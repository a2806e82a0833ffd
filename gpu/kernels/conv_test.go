package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// layoutStrides returns element strides for a tensor with logical axes (major, minor, s0, s1,
// s2) of the given sizes stored in the given order (a permutation of 0..4, slowest first).
func layoutStrides(sizes [5]int, order [5]int) (ConvStrides, int) {
	var st [5]int
	n := 1
	for i := 4; i >= 0; i-- {
		st[order[i]] = n
		n *= sizes[order[i]]
	}
	return ConvStrides{Major: st[0], Minor: st[1], Spatial: [3]int{st[2], st[3], st[4]}}, n
}

// refConv is the direct loop of ConvShape's definition, in float64, read and written through
// the strides.
func refConv(s ConvShape, x, w []float32, ySize int) []float32 {
	y := make([]float32, ySize)
	cg, og := s.Channels/s.Groups, s.OutChannels/s.Groups
	xs, ws, ys := s.XStrides, s.WStrides, s.YStrides
	for b := range s.Batch {
		for q0 := range s.Out[0] {
			for q1 := range s.Out[1] {
				for q2 := range s.Out[2] {
					for o := range s.OutChannels {
						g := o / og
						var sum float64
						for k0 := range s.Kernel[0] {
							for k1 := range s.Kernel[1] {
								for k2 := range s.Kernel[2] {
									q, k := [3]int{q0, q1, q2}, [3]int{k0, k1, k2}
									xOff := b * xs.Major
									ok := true
									for d := range 3 {
										p := q[d]*s.Stride[d] + k[d]*s.KernelDilation[d] - s.PadLo[d]
										if p < 0 || p%s.InputDilation[d] != 0 || p/s.InputDilation[d] >= s.In[d] {
											ok = false
											break
										}
										xOff += p / s.InputDilation[d] * xs.Spatial[d]
									}
									if !ok {
										continue
									}
									for c := range cg {
										xi := xOff + (g*cg+c)*xs.Minor
										wi := c*ws.Major + o*ws.Minor + k0*ws.Spatial[0] + k1*ws.Spatial[1] + k2*ws.Spatial[2]
										sum += float64(x[xi]) * float64(w[wi])
									}
								}
							}
						}
						y[b*ys.Major+o*ys.Minor+q0*ys.Spatial[0]+q1*ys.Spatial[1]+q2*ys.Spatial[2]] = float32(sum)
					}
				}
			}
		}
	}
	return y
}

// outDim is the output size of one spatial axis with padding lo+hi.
func outDim(in, k, stride, lo, hi, ld, kd int) int {
	return ((in-1)*ld+1+lo+hi-((k-1)*kd+1))/stride + 1
}

func TestConvMatchesDirectLoop(t *testing.T) {
	type give struct {
		b, h, w, c, o, kh, kw, stride, pad, ld, kd, groups int
	}
	cases := []give{
		{1, 5, 5, 1, 1, 3, 3, 1, 1, 1, 1, 1},
		{2, 7, 6, 3, 5, 3, 3, 1, 1, 1, 1, 1},
		{3, 9, 9, 3, 4, 3, 3, 2, 1, 1, 1, 1},
		{2, 8, 8, 6, 7, 1, 1, 2, 0, 1, 1, 1},
		{2, 5, 7, 4, 6, 1, 1, 1, 0, 1, 1, 1},
		{1, 6, 6, 4, 4, 3, 3, 1, 2, 2, 1, 1}, // input dilation (gradient of a stride-2 conv)
		{2, 9, 9, 2, 3, 3, 3, 1, 2, 1, 2, 1}, // kernel dilation
		{2, 6, 6, 4, 6, 3, 3, 1, 1, 1, 1, 2}, // groups
		{2, 11, 11, 3, 16, 7, 7, 2, 3, 1, 1, 1},
		{1, 6, 7, 5, 3, 3, 3, 1, -1, 1, 1, 1},  // negative padding crops
		{4, 6, 6, 40, 20, 3, 3, 1, 1, 1, 1, 1}, // several depth blocks per kernel position
		{13, 7, 6, 3, 4, 3, 3, 1, 1, 1, 1, 1},  // batch not a multiple of the panel height
		// Channels ≥ 16: the indirect kernel (channels-last layouts).
		{3, 7, 7, 16, 37, 3, 3, 2, 1, 1, 1, 1},
		{2, 6, 5, 24, 8, 3, 3, 1, 2, 2, 1, 1},   // input dilation
		{2, 5, 5, 300, 33, 3, 3, 1, 1, 1, 1, 1}, // two channel chunks of uneven size, several segment blocks
		{2, 6, 6, 32, 20, 3, 3, 1, 1, 1, 1, 2},  // groups of 16 channels
		{1, 4, 4, 20, 70, 1, 1, 1, 0, 1, 1, 1},
		{3, 5, 4, 16, 9, 3, 3, 1, 1, 2, 1, 1}, // input dilation, odd padding: every phase has taps
		{2, 4, 4, 16, 8, 1, 1, 1, 0, 2, 1, 1}, // 1×1 over a dilated input: three phases read nothing
		// Padding wider than the kernel: whole kernel rows and taps fall outside the input.
		{2, 3, 3, 3, 4, 1, 1, 1, 2, 1, 1, 1},
		{1, 4, 5, 3, 2, 3, 3, 1, 4, 1, 1, 1},
		{2, 3, 3, 16, 4, 1, 1, 1, 2, 1, 1, 1},
	}
	// Layouts: storage order of (major, minor, s0, s1, s2) for x, w and y.
	layouts := []struct {
		name    string
		x, w, y [5]int
	}{
		{"channels-last", [5]int{0, 2, 3, 4, 1}, [5]int{2, 3, 4, 0, 1}, [5]int{0, 2, 3, 4, 1}},
		{"channels-first", [5]int{0, 1, 2, 3, 4}, [5]int{1, 0, 2, 3, 4}, [5]int{0, 1, 2, 3, 4}},
		// GoMLX's kernel gradient of a channels-last conv: x's "batch" (its channels) contiguous,
		// the "kernel" (dY) [n, ho, wo, co], output HWIO.
		{"kernel-gradient", [5]int{1, 2, 3, 4, 0}, [5]int{0, 2, 3, 4, 1}, [5]int{2, 3, 4, 0, 1}},
		{"batch-contiguous, odd kernel layout", [5]int{2, 3, 4, 1, 0}, [5]int{1, 2, 3, 4, 0}, [5]int{1, 2, 3, 4, 0}},
	}
	r := rand.New(rand.NewPCG(5, 6))
	for _, pk := range []struct {
		threads int
		mk      *microKernel
	}{{1, selectedKernel}, {2, selectedKernel}, {2, genericKernel}, {1, allKernels()[len(allKernels())/2]}} {
		threads := pk.threads
		pool := newPoolWithKernel(threads, pk.mk)
		for _, l := range layouts {
			for _, g := range cases {
				s := ConvShape{Batch: g.b, Channels: g.c, OutChannels: g.o, Groups: g.groups,
					In: [3]int{1, g.h, g.w}, Kernel: [3]int{1, g.kh, g.kw},
					Stride: [3]int{1, g.stride, g.stride}, PadLo: [3]int{0, g.pad, g.pad},
					InputDilation: [3]int{1, g.ld, g.ld}, KernelDilation: [3]int{1, g.kd, g.kd}}
				s.Out = [3]int{1, outDim(g.h, g.kh, g.stride, g.pad, g.pad, g.ld, g.kd), outDim(g.w, g.kw, g.stride, g.pad, g.pad, g.ld, g.kd)}
				var nx, nw, ny int
				s.XStrides, nx = layoutStrides([5]int{g.b, g.c, 1, g.h, g.w}, l.x)
				s.WStrides, nw = layoutStrides([5]int{g.c / g.groups, g.o, 1, g.kh, g.kw}, l.w)
				s.YStrides, ny = layoutStrides([5]int{g.b, g.o, s.Out[0], s.Out[1], s.Out[2]}, l.y)
				name := fmt.Sprintf("%s/threads%d/%s/%+v", pk.mk.name, threads, l.name, g)
				x, w := randSlice(r, nx), randSlice(r, nw)
				y := randSlice(r, ny) // overwritten
				if err := pool.Conv(s, x, w, y); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				closeEnough(t, name, y, refConv(s, x, w, ny), s.Kernel[1]*s.Kernel[2]*s.Channels)
			}
		}
		pool.Close()
	}
}

func TestConvChannelsLastMatchesDefaults(t *testing.T) {
	s := ConvShape{Batch: 2, Channels: 3, OutChannels: 4, Groups: 1, In: [3]int{1, 5, 6}, Out: [3]int{1, 5, 6},
		Kernel: [3]int{1, 3, 3}, Stride: [3]int{1, 1, 1}, PadLo: [3]int{0, 1, 1}, InputDilation: [3]int{1, 1, 1}, KernelDilation: [3]int{1, 1, 1}}
	s.ChannelsLast()
	want, _ := layoutStrides([5]int{2, 3, 1, 5, 6}, [5]int{0, 2, 3, 4, 1})
	if s.XStrides != want {
		t.Fatalf("ChannelsLast x strides %+v, want %+v", s.XStrides, want)
	}
}

func TestConvRejectsBadShapes(t *testing.T) {
	pool := NewPool(1)
	defer pool.Close()
	s := ConvShape{Batch: 1, Channels: 3, OutChannels: 4, Groups: 2, In: [3]int{1, 4, 4}, Out: [3]int{1, 2, 2},
		Kernel: [3]int{1, 3, 3}, Stride: [3]int{1, 1, 1}, InputDilation: [3]int{1, 1, 1}, KernelDilation: [3]int{1, 1, 1}}
	s.ChannelsLast()
	if err := pool.Conv(s, nil, nil, nil); err == nil {
		t.Fatal("no error for 2 groups over 3 channels")
	}
	s.Groups = 1
	s.ChannelsLast()
	if err := pool.Conv(s, make([]float32, 10), make([]float32, 108), make([]float32, 16)); err == nil {
		t.Fatal("no error for a too short input")
	}
}

// TestConvKernelGradientReadsInPlace checks the layout of GoMLX's kernel gradient takes the
// fast path: rows pixel-major, the kernel (dY) read as one strided run, y written directly.
func TestConvKernelGradientReadsInPlace(t *testing.T) {
	b, c, o, h := 8, 16, 32, 6
	s := ConvShape{Batch: c, Channels: b, OutChannels: o, Groups: 1, In: [3]int{1, h, h}, Out: [3]int{1, 3, 3},
		Kernel: [3]int{1, h, h}, Stride: [3]int{1, 1, 1}, PadLo: [3]int{0, 1, 1}, InputDilation: [3]int{1, 1, 1}, KernelDilation: [3]int{1, 1, 1}}
	s.XStrides, _ = layoutStrides([5]int{c, b, 1, h, h}, [5]int{1, 2, 3, 4, 0})
	s.WStrides, _ = layoutStrides([5]int{b, o, 1, h, h}, [5]int{0, 2, 3, 4, 1})
	s.YStrides, _ = layoutStrides([5]int{c, o, 1, 3, 3}, [5]int{2, 3, 4, 0, 1})
	if s.XStrides.Major != 1 {
		t.Fatal("test set-up: x's batch axis should be contiguous")
	}
	if _, ok := kernelDepthStride(&s, b, true); !ok {
		t.Fatal("dY is not read as one strided run")
	}
	if _, ok := newKernelSource(&s, nil, 0, b, true).(Strided); !ok {
		t.Fatal("dY is gathered, not read in place")
	}
	if step, ok := outputRowStep(&s, true); !ok || step != o {
		t.Fatalf("output row step %d, direct %v; want %d, true", step, ok, o)
	}
}
