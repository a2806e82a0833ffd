package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// refConv is the direct loop of ConvShape's definition, in float64.
func refConv(s ConvShape, x, w []float32) []float32 {
	y := make([]float32, s.outputSize())
	cg, og := s.Channels/s.Groups, s.OutChannels/s.Groups
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
									var pos [3]int
									ok := true
									for d := range 3 {
										p := q[d]*s.Stride[d] + k[d]*s.KernelDilation[d] - s.PadLo[d]
										if p < 0 || p%s.InputDilation[d] != 0 {
											ok = false
											break
										}
										p /= s.InputDilation[d]
										if p >= s.In[d] {
											ok = false
											break
										}
										pos[d] = p
									}
									if !ok {
										continue
									}
									for c := range cg {
										xi := (((b*s.In[0]+pos[0])*s.In[1]+pos[1])*s.In[2]+pos[2])*s.Channels + g*cg + c
										wi := (((k0*s.Kernel[1]+k1)*s.Kernel[2]+k2)*cg+c)*s.OutChannels + o
										sum += float64(x[xi]) * float64(w[wi])
									}
								}
							}
						}
						y[(((b*s.Out[0]+q0)*s.Out[1]+q1)*s.Out[2]+q2)*s.OutChannels+o] = float32(sum)
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
	}
	r := rand.New(rand.NewPCG(5, 6))
	for _, threads := range []int{1, 2} {
		pool := NewPool(threads)
		for _, g := range cases {
			s := ConvShape{Batch: g.b, Channels: g.c, OutChannels: g.o, Groups: g.groups,
				In: [3]int{1, g.h, g.w}, Kernel: [3]int{1, g.kh, g.kw},
				Stride: [3]int{1, g.stride, g.stride}, PadLo: [3]int{0, g.pad, g.pad},
				InputDilation: [3]int{1, g.ld, g.ld}, KernelDilation: [3]int{1, g.kd, g.kd}}
			s.Out = [3]int{1, outDim(g.h, g.kh, g.stride, g.pad, g.pad, g.ld, g.kd), outDim(g.w, g.kw, g.stride, g.pad, g.pad, g.ld, g.kd)}
			name := fmt.Sprintf("threads%d/%+v", threads, g)
			x := randSlice(r, s.inputSize())
			w := randSlice(r, s.kernelSize())
			y := randSlice(r, s.outputSize()) // overwritten
			if err := pool.Conv(s, x, w, y); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			closeEnough(t, name, y, refConv(s, x, w), s.Kernel[1]*s.Kernel[2]*s.Channels)
		}
		pool.Close()
	}
}

func TestConvRejectsBadShapes(t *testing.T) {
	pool := NewPool(1)
	defer pool.Close()
	s := ConvShape{Batch: 1, Channels: 3, OutChannels: 4, Groups: 2, In: [3]int{1, 4, 4}, Out: [3]int{1, 2, 2},
		Kernel: [3]int{1, 3, 3}, Stride: [3]int{1, 1, 1}, InputDilation: [3]int{1, 1, 1}, KernelDilation: [3]int{1, 1, 1}}
	if err := pool.Conv(s, nil, nil, nil); err == nil {
		t.Fatal("no error for 2 groups over 3 channels")
	}
	s.Groups = 1
	if err := pool.Conv(s, make([]float32, 10), make([]float32, 108), make([]float32, 16)); err == nil {
		t.Fatal("no error for a too short input")
	}
}
