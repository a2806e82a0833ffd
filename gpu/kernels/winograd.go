package kernels

import (
	"os"
	"sync"
	"unsafe"
)

// Winograd's minimal filtering F(2×2, 3×3) (Lavin & Gray, "Fast Algorithms for Convolutional
// Neural Networks", 2016) computes each 2×2 block of outputs of a 3×3 stride-1 convolution from
// a 4×4 block of inputs with 16 multiplications per channel pair instead of 36:
//
//	Y = Aᵀ·[(G·g·Gᵀ) ⊙ (Bᵀ·d·B)]·A
//
// Summed over input channels, the element-wise products become 16 independent matrix products
// (tiles × input channels)·(input channels × output channels), which run on the packed
// micro-kernels. The transforms are additions and halvings (exact up to their rounding), so
// results differ from the direct convolution by a few units in the last place of the sums.
// Residual networks spend most of their time in exactly these convolutions, forward and in
// GoMLX's input gradient (a stride-1 convolution with the reversed kernel).

// winogradTiles is how many 2×2 output tiles one block transforms and multiplies together: a
// multiple of every micro-kernel's mr (4, 6, 12) within blockM, so the products need no edge
// tiles, and few enough that a block's transformed inputs and products (16 planes each) stay
// in L2 at 64 channels.
const winogradTiles = 96

// winogradMinChannels is the fewest input and output channels worth transforming: below it the
// products are too shallow for the transforms' cost to pay off.
const winogradMinChannels = 32

// winogradMaxPairs bounds Channels·OutChannels: the transformed kernel (16 floats per channel
// pair), or the kernel gradient's sums, stay in the workspace pool once allocated, and beyond
// 256×512 channels they would raise the training step's peak memory by more than the
// multiplications they save are worth (ResNet-18's last stage gains a fifth at most).
const winogradMaxPairs = 256 * 512

// winogradMinTiles is the fewest tiles worth transforming the kernel for: its transform costs
// about as much per (input, output) channel pair as the multiplications it saves on this many
// tiles. (A variable so tests can run small shapes.)
var winogradMinTiles = 256

// useWinograd turns the Winograd path on where the transforms are vectorised; DCL_WINOGRAD=0
// turns it off (to compare with the direct convolution, or to rule it out).
var useWinograd = hasWinograd && os.Getenv("DCL_WINOGRAD") != "0"

// winogradPlan is an eligible convolution's geometry: the two spatial axes with 3-tap kernels
// and the grid of 2×2 output tiles over them.
type winogradPlan struct {
	da, db         int // spatial axes of the kernel's rows and columns
	tilesA, tilesB int // tiles along da and db
	tiles          int // Batch·tilesA·tilesB
}

// planWinograd reports whether s is a 3×3 stride-1 convolution (any padding, no dilation, one
// group) with channels contiguous in x and y, and the plan to run it.
func planWinograd(mk *microKernel, s *ConvShape) (winogradPlan, bool) {
	var pl winogradPlan
	if !useWinograd || mk.indirect == nil || s.Groups != 1 || s.XStrides.Minor != 1 || s.YStrides.Minor != 1 ||
		s.Channels%8 != 0 || s.OutChannels%8 != 0 || s.OutChannels%mk.nr != 0 ||
		s.Channels < winogradMinChannels || s.OutChannels < winogradMinChannels || s.Channels*s.OutChannels > winogradMaxPairs {
		return pl, false
	}
	var ok bool
	if pl.da, pl.db, ok = winogradAxes(s, func(d int) bool { return s.Kernel[d] == 3 }); !ok {
		return pl, false
	}
	pl.tilesA, pl.tilesB = (s.Out[pl.da]+1)/2, (s.Out[pl.db]+1)/2
	pl.tiles = s.Batch * pl.tilesA * pl.tilesB
	return pl, pl.tiles >= winogradMinTiles
}

// winogradAxes returns the two spatial axes d of s for which threes(d) holds (the 3-tap axes of
// the algorithm), every other axis being a unit one (size 1, no padding), stride 1 and no
// dilation on every axis; false when s is not so.
func winogradAxes(s *ConvShape, threes func(d int) bool) (da, db int, ok bool) {
	var axes []int
	for d := range 3 {
		if s.Stride[d] != 1 || s.InputDilation[d] != 1 || s.KernelDilation[d] != 1 {
			return 0, 0, false
		}
		switch {
		case threes(d):
			axes = append(axes, d)
		case s.Kernel[d] == 1 && s.In[d] == 1 && s.Out[d] == 1 && s.PadLo[d] == 0:
		default:
			return 0, 0, false
		}
	}
	if len(axes) != 2 {
		return 0, 0, false
	}
	return axes[0], axes[1], true
}

// pointWindow points dst[size·ra + rb] (ra, rb < size) at the channel vector (a0+ra, b0+rb)
// along a tensor's two spatial axes (strides sa and sb, from base in data), or at outside where
// that position falls off [0, limA)×[0, limB): the padding's zeros, or a sink for outputs past
// the edge.
func pointWindow(dst []unsafe.Pointer, size int, data []float32, base, a0, b0, limA, limB, sa, sb int, outside unsafe.Pointer) {
	for ra := range size {
		ia := a0 + ra
		for rb := range size {
			ib := b0 + rb
			if ia < 0 || ia >= limA || ib < 0 || ib >= limB {
				dst[size*ra+rb] = outside
				continue
			}
			dst[size*ra+rb] = unsafe.Pointer(&data[base+ia*sa+ib*sb])
		}
	}
}

// winogradScratch is one block's workspace.
type winogradScratch struct {
	v, m       []float32        // transformed inputs [16][tiles][Channels], products [16][tiles][OutChannels]
	zero, sink []float32        // reads of padding, writes past the output's edge
	in, out    []unsafe.Pointer // per tile: its 16 input vectors, its 4 output vectors
	offs       []int64          // row ends for the indirect micro-kernel
}

var winogradScratchPool = sync.Pool{New: func() any { return new(winogradScratch) }}

// getWinogradScratch returns a workspace whose transforms hold nv and nm floats. They come from
// the off-heap pool for one call: a sync.Pool may drop its objects, and an off-heap buffer
// dropped so would never be reused.
func getWinogradScratch(nv, nm int) *winogradScratch {
	sc := winogradScratchPool.Get().(*winogradScratch)
	sc.v, sc.m = floats.get(nv), floats.get(nm)
	return sc
}

// putWinogradScratch gives the transforms back and returns sc to its pool without its
// pointers into the convolution's operands.
func putWinogradScratch(sc *winogradScratch) {
	floats.put(sc.v)
	floats.put(sc.m)
	sc.v, sc.m = nil, nil
	clear(sc.in)
	clear(sc.out)
	winogradScratchPool.Put(sc)
}

func resized[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// convWinograd computes y = conv(x, w) for a convolution planWinograd accepted, in parallel over
// blocks of tiles. Each tile is computed alone, whichever thread takes its block, so results
// do not depend on the threads.
func (p *Pool) convWinograd(s *ConvShape, pl winogradPlan, x, w, y []float32) {
	mk := p.kernel
	cin, cout := s.Channels, s.OutChannels
	u := floats.get(16 * cin * cout)
	defer floats.put(u)
	p.winogradKernel(mk, s, pl, w, u)
	T := winogradTiles
	blocks := (pl.tiles + T - 1) / T
	threads := 1
	if p.threads > 1 && pl.tiles*cin*cout >= minParallelFlops {
		threads = p.threads
	}
	// Several chunks per thread, taken in turn: a thread the machine slows down leaves its
	// blocks to the others instead of holding everyone at the end.
	pts := splitPoints(blocks, 4*threads, 1)
	p.ParallelFor(len(pts)-1, func(t int) {
		sc := getWinogradScratch(16*T*cin, 16*T*cout)
		defer putWinogradScratch(sc)
		for b := pts[t]; b < pts[t+1]; b++ {
			winogradBlock(mk, s, pl, sc, x, u, y, T, b*T, min(T, pl.tiles-b*T))
		}
	})
}

// winogradKernel writes U = G·g·Gᵀ for every (input channel, output channel) pair into u, as
// the indirect micro-kernel reads its right operand: for each of the 16 positions k, a
// Channels×OutChannels matrix in blockK-deep blocks of nr-wide panels ([kc][nr], the nr output
// channels of one input channel contiguous). The transform runs eight output channels at a
// time, so they must be contiguous; where they are not in w (GoMLX's input gradient reads the
// kernel with input and output channels swapped) each thread first copies the taps of
// sixteen input channels at a time with them so.
func (p *Pool) winogradKernel(mk *microKernel, s *ConvShape, pl winogradPlan, w, u []float32) {
	cin, cout, nr := s.Channels, s.OutChannels, mk.nr
	ws := s.WStrides
	plane := cin * cout
	const chunk = 16
	p.ParallelRange(cin, chunk, func(lo, hi int) {
		var taps [9]unsafe.Pointer
		var tmp []float32
		if ws.Minor != 1 {
			tmp = floats.get(9 * chunk * cout)
			defer floats.put(tmp)
		}
		for c0 := lo; c0 < hi; c0 += chunk {
			c1 := min(hi, c0+chunk)
			src, major, sa, sb, first := w, ws.Major, ws.Spatial[pl.da], ws.Spatial[pl.db], 0
			if tmp != nil {
				transposeTaps(s, pl, w, c0, c1, tmp)
				src, major, sa, sb, first = tmp, 9*cout, 3*cout, cout, c0
			}
			for c := c0; c < c1; c++ {
				pc := c / blockK * blockK
				kc := min(blockK, cin-pc)
				for jr := 0; jr < cout; jr += nr {
					for a := range 3 {
						for b := range 3 {
							taps[3*a+b] = unsafe.Pointer(&src[(c-first)*major+jr+a*sa+b*sb])
						}
					}
					winogradKernelVec(&taps, nr, u[pc*cout+(c-pc)*nr+jr*kc:], plane)
				}
			}
		}
	})
}

// transposeTaps copies the kernel taps of input channels [c0, c1) into dst as [c][a][b][o], the
// output channels contiguous. Reading sixteen input channels per output channel keeps the
// reads on one cache line where the input channels are contiguous.
func transposeTaps(s *ConvShape, pl winogradPlan, w []float32, c0, c1 int, dst []float32) {
	cout := s.OutChannels
	ws := s.WStrides
	for a := range 3 {
		for b := range 3 {
			base := a*ws.Spatial[pl.da] + b*ws.Spatial[pl.db]
			for o := range cout {
				col := base + o*ws.Minor
				for c := c0; c < c1; c++ {
					dst[((c-c0)*9+3*a+b)*cout+o] = w[col+c*ws.Major]
				}
			}
		}
	}
}

// winogradBlock computes the n tiles from tile t0 in a block of T: it points each tile's 16 inputs into x (or at
// zeros for padding) and its 4 outputs into y (or at a sink past the edge), transforms the
// inputs, runs the 16 products and transforms them back into y. A block of fewer than T tiles
// is padded with zero tiles.
func winogradBlock(mk *microKernel, s *ConvShape, pl winogradPlan, sc *winogradScratch, x, u, y []float32, T, t0, n int) {
	cin, cout := s.Channels, s.OutChannels
	sc.in = resized(sc.in, 16*T)
	sc.out = resized(sc.out, 4*T)
	sc.offs = resized(sc.offs, T)
	if len(sc.zero) < cin {
		sc.zero = make([]float32, cin)
	}
	sc.sink = resized(sc.sink, cout)
	zero, sink := unsafe.Pointer(&sc.zero[0]), unsafe.Pointer(&sc.sink[0])
	xs, ys := s.XStrides, s.YStrides
	inA, inB := s.In[pl.da], s.In[pl.db]
	outA, outB := s.Out[pl.da], s.Out[pl.db]
	padA, padB := s.PadLo[pl.da], s.PadLo[pl.db]
	perImage := pl.tilesA * pl.tilesB
	for i := range T {
		ins, outs := sc.in[16*i:16*i+16], sc.out[4*i:4*i+4]
		if i >= n {
			for k := range ins {
				ins[k] = zero
			}
			for k := range outs {
				outs[k] = sink
			}
			continue
		}
		q := t0 + i
		b, r := q/perImage, q%perImage
		ta, tb := 2*(r/pl.tilesB), 2*(r%pl.tilesB)
		pointWindow(ins, 4, x, b*xs.Major, ta-padA, tb-padB, inA, inB, xs.Spatial[pl.da], xs.Spatial[pl.db], zero)
		pointWindow(outs, 2, y, b*ys.Major, ta, tb, outA, outB, ys.Spatial[pl.da], ys.Spatial[pl.db], sink)
	}
	winogradInput(sc.in, T, cin, sc.v, T*cin)
	clear(sc.m)
	mr, nr := mk.mr, mk.nr
	for pc := 0; pc < cin; pc += blockK {
		kc := min(blockK, cin-pc)
		for i := range T {
			sc.offs[i] = int64(i*cin + pc + kc)
		}
		for k := range 16 {
			vBase := unsafe.Pointer(&sc.v[k*T*cin])
			block := u[k*cin*cout+pc*cout:]
			for jr := 0; jr < cout; jr += nr {
				bPanel := unsafe.Pointer(&block[(jr/nr)*kc*nr])
				for ir := 0; ir < T; ir += mr {
					mk.indirect(1, kc, &sc.offs[ir], vBase, zero, bPanel, unsafe.Pointer(&sc.m[(k*T+ir)*cout+jr]), cout)
				}
			}
		}
	}
	winogradOutput(sc.m, T*cout, T, cout, sc.out)
}
