package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // GoMLX graphs read best unqualified
	"github.com/gomlx/gomlx/core/tensors/images"
)

// convCase is a 2-D convolution in NHWC with kernel [kh, kw, c, o], symmetric padding.
type convCase struct {
	b, h, w, c, o, kh, kw, stride, pad int
}

func (g convCase) outHW() (int, int) {
	return (g.h+2*g.pad-g.kh)/g.stride + 1, (g.w+2*g.pad-g.kw)/g.stride + 1
}

// refConvNHWC returns, by direct loops in float64, the convolution y and, for the loss
// Σ y·r, its gradients with respect to x and to the kernel.
func refConvNHWC(g convCase, x, k, r []float32) (y, dx, dk []float32) {
	oh, ow := g.outHW()
	y = make([]float32, g.b*oh*ow*g.o)
	dx64 := make([]float64, len(x))
	dk64 := make([]float64, len(k))
	for b := range g.b {
		for i := range oh {
			for j := range ow {
				for o := range g.o {
					yi := ((b*oh+i)*ow+j)*g.o + o
					var sum float64
					for ki := range g.kh {
						for kj := range g.kw {
							ih, iw := i*g.stride+ki-g.pad, j*g.stride+kj-g.pad
							if ih < 0 || ih >= g.h || iw < 0 || iw >= g.w {
								continue
							}
							for c := range g.c {
								xi := ((b*g.h+ih)*g.w+iw)*g.c + c
								ki := ((ki*g.kw+kj)*g.c+c)*g.o + o
								sum += float64(x[xi]) * float64(k[ki])
								dx64[xi] += float64(r[yi]) * float64(k[ki])
								dk64[ki] += float64(r[yi]) * float64(x[xi])
							}
						}
					}
					y[yi] = float32(sum)
				}
			}
		}
	}
	dx, dk = make([]float32, len(x)), make([]float32, len(k))
	for i, v := range dx64 {
		dx[i] = float32(v)
	}
	for i, v := range dk64 {
		dk[i] = float32(v)
	}
	return y, dx, dk
}

var convCases = []convCase{
	{b: 1, h: 5, w: 5, c: 1, o: 1, kh: 3, kw: 3, stride: 1, pad: 1},
	{b: 2, h: 7, w: 6, c: 3, o: 4, kh: 3, kw: 3, stride: 1, pad: 1},
	{b: 3, h: 9, w: 9, c: 3, o: 5, kh: 3, kw: 3, stride: 2, pad: 1}, // odd size, stride 2
	{b: 2, h: 8, w: 8, c: 4, o: 6, kh: 3, kw: 3, stride: 2, pad: 1},
	{b: 2, h: 8, w: 8, c: 6, o: 5, kh: 1, kw: 1, stride: 2, pad: 0}, // ResNet shortcut
	{b: 2, h: 5, w: 7, c: 4, o: 3, kh: 1, kw: 1, stride: 1, pad: 0},
	{b: 2, h: 6, w: 6, c: 3, o: 4, kh: 3, kw: 3, stride: 1, pad: 0},   // no padding
	{b: 2, h: 11, w: 10, c: 3, o: 8, kh: 7, kw: 7, stride: 2, pad: 3}, // ResNet-50 stem
	// 256 tiles of 2×2 in every pass: the forward convolution and both gradients take the
	// kernels' Winograd paths (channels-last; channels-first stays direct).
	{b: 16, h: 8, w: 8, c: 32, o: 32, kh: 3, kw: 3, stride: 1, pad: 1},
}

// TestConvForwardAndGradients checks the convolution and both gradients GoMLX derives from it
// (which are ConvGeneral again, with swapped axes, input dilation and Reverse) against direct
// loops, in both channel layouts.
func TestConvForwardAndGradients(t *testing.T) {
	be := newTestBackend(t)
	r := rand.New(rand.NewPCG(11, 12))
	for _, g := range convCases {
		for _, layout := range []images.ChannelsAxisConfig{images.ChannelsLast, images.ChannelsFirst} {
			name := fmt.Sprintf("%+v/layout%d", g, layout)
			t.Run(name, func(t *testing.T) {
				oh, ow := g.outHW()
				xt, x := randTensor(r, g.b, g.h, g.w, g.c)
				kt, k := randTensor(r, g.kh, g.kw, g.c, g.o)
				rt, rv := randTensor(r, g.b, oh, ow, g.o)
				wantY, wantDX, wantDK := refConvNHWC(g, x, k, rv)
				got := runGraph(t, be, func(in []*Node) []*Node {
					x, k, r := in[0], in[1], in[2]
					if layout == images.ChannelsFirst {
						// Same values, NCHW input and [o, c, kh, kw] kernel; results back to NHWC.
						x = TransposeAllAxes(x, 0, 3, 1, 2)
						k = TransposeAllAxes(k, 3, 2, 0, 1)
						r = TransposeAllAxes(r, 0, 3, 1, 2)
					}
					conv := Convolve(x, k).ChannelsAxis(layout).Strides(g.stride)
					if g.pad > 0 {
						conv = conv.PaddingPerDim([][2]int{{g.pad, g.pad}, {g.pad, g.pad}})
					}
					y := conv.Done()
					grads := Gradient(ReduceAllSum(Mul(y, r)), x, k)
					if layout == images.ChannelsFirst {
						y = TransposeAllAxes(y, 0, 2, 3, 1)
						grads[0] = TransposeAllAxes(grads[0], 0, 2, 3, 1)
						grads[1] = TransposeAllAxes(grads[1], 2, 3, 1, 0)
					}
					return []*Node{y, grads[0], grads[1]}
				}, xt, kt, rt)
				assertClose(t, "forward", got[0], wantY, 1e-5)
				assertClose(t, "gradient wrt input", got[1], wantDX, 1e-5)
				assertClose(t, "gradient wrt kernel", got[2], wantDK, 1e-5)
			})
		}
	}
}

// TestConvMatchesGoBackend checks ConvGeneral forward against the pure-Go backend's own (direct, slow)
// convolution, with kernel dilation and channel groups too.
func TestConvMatchesGoBackend(t *testing.T) {
	be, ref := newTestBackend(t), newGoBackend(t)
	r := rand.New(rand.NewPCG(13, 14))
	cases := []struct {
		name              string
		x, k              []int
		stride, dil, grps int
	}{
		{"plain", []int{2, 9, 8, 3}, []int{3, 3, 3, 5}, 1, 1, 1},
		{"stride3", []int{2, 10, 10, 2}, []int{3, 3, 2, 4}, 3, 1, 1},
		{"dilation2", []int{2, 9, 9, 2}, []int{3, 3, 2, 3}, 1, 2, 1},
		{"1d", []int{3, 11, 4}, []int{3, 4, 5}, 2, 1, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			xt, _ := randTensor(r, c.x...)
			kt, _ := randTensor(r, c.k...)
			fn := func(in []*Node) []*Node {
				conv := Convolve(in[0], in[1]).Strides(c.stride).PadSame().ChannelGroupCount(c.grps)
				if c.dil > 1 {
					conv = conv.Dilations(c.dil)
				}
				return []*Node{conv.Done()}
			}
			got := runGraph(t, be, fn, xt, kt)[0]
			want := runGraph(t, ref, fn, xt, kt)[0]
			assertClose(t, c.name, got, want, 1e-5)
		})
	}
}

// TestConvChannelGroups checks a grouped convolution against the concatenation of one
// convolution per group (before GoMLX v0.28 the pure-Go backend's grouped convolution panicked).
func TestConvChannelGroups(t *testing.T) {
	be := newTestBackend(t)
	r := rand.New(rand.NewPCG(15, 16))
	xt, _ := randTensor(r, 2, 7, 6, 4)
	kt, _ := randTensor(r, 3, 3, 2, 6)
	got := runGraph(t, be, func(in []*Node) []*Node {
		grouped := Convolve(in[0], in[1]).Strides(1).PadSame().ChannelGroupCount(2).Done()
		var parts []*Node
		for g := range 2 {
			x := SliceAxis(in[0], 3, AxisRange(2*g, 2*g+2))
			k := SliceAxis(in[1], 3, AxisRange(3*g, 3*g+3))
			parts = append(parts, Convolve(x, k).Strides(1).PadSame().Done())
		}
		return []*Node{grouped, Concatenate(parts, 3)}
	}, xt, kt)
	assertClose(t, "grouped", got[0], got[1], 1e-6)
}
