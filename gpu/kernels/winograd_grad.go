package kernels

import "unsafe"

// The kernel gradient of a 3×3 convolution, as GoMLX emits it, is itself a convolution: the
// images' channels are its batch, the images its input channels, the output gradient dY its
// kernel (as large as the image) and the 3×3 kernel gradient its output. Cutting dY into 2×2
// tiles turns it into a sum of F(3×3, 2×2) problems (Lavin & Gray's algorithm with the roles of
// the 3×3 output and the 2×2 filter): per tile, 16 multiplications per channel pair instead of
// 36, and summed over every tile of every image, 16 matrix products (channels × tiles)·(tiles ×
// output channels) deep in tiles, whose operands pack as contiguous runs. The output
// transform runs once per call, on the sums. Results do not depend on the thread count.

// winogradGradTiles returns how many dY tiles one block transforms: at least one packed block
// deep (blockK), and as many more as fit 4 MiB of transforms (16·tiles·(Batch+OutChannels)
// floats), so narrow layers, whose blocks are quick, hand off between threads less often.
func winogradGradTiles(s *ConvShape) int {
	return max(blockK, (1<<20)/(16*(s.Batch+s.OutChannels))/blockK*blockK)
}

// winogradGradPlan is an eligible convolution's geometry: the two spatial axes with 3×3 outputs
// and the grid of 2×2 tiles over the kernel (dY) along them.
type winogradGradPlan struct {
	da, db         int
	tilesA, tilesB int
	tiles          int // Channels·tilesA·tilesB
}

// planWinogradGrad reports whether s is a stride-1 convolution with a 3×3 output (any kernel
// size and padding, no dilation, one group) whose batch axis is contiguous in x and whose
// output channels are contiguous in w and y: the kernel gradient of a channels-last 3×3
// stride-1 convolution.
func planWinogradGrad(mk *microKernel, s *ConvShape) (winogradGradPlan, bool) {
	var pl winogradGradPlan
	if !useWinograd || s.Groups != 1 || s.XStrides.Major != 1 || s.WStrides.Minor != 1 || s.YStrides.Minor != 1 ||
		s.Batch%8 != 0 || s.OutChannels%8 != 0 || s.Batch < winogradMinChannels || s.OutChannels < winogradMinChannels ||
		s.Batch*s.OutChannels > winogradMaxPairs {
		return pl, false
	}
	var ok bool
	if pl.da, pl.db, ok = winogradAxes(s, func(d int) bool { return s.Out[d] == 3 }); !ok {
		return pl, false
	}
	pl.tilesA, pl.tilesB = (s.Kernel[pl.da]+1)/2, (s.Kernel[pl.db]+1)/2
	pl.tiles = s.Channels * pl.tilesA * pl.tilesB
	return pl, pl.tiles >= winogradMinTiles
}

// convWinogradGrad computes y = conv(x, w) for a convolution planWinogradGrad accepted. Narrow
// layers (small sums) cut the tiles into fixed parts summed apart and then added in order
// (winogradGradParts); wide ones go one block of tiles at a time: the threads transform the
// block's tiles together, then share out the 16 products, each adding into its own planes of
// one sum. Either way every value is added in the same order whatever the thread count.
func (p *Pool) convWinogradGrad(s *ConvShape, pl winogradGradPlan, x, w, y []float32) {
	mk := p.kernel
	cin, cout := s.Batch, s.OutChannels
	T := winogradGradTiles(s)
	sum := floats.get(16 * cin * cout)
	defer floats.put(sum)
	if 16*cin*cout <= winogradPartSums {
		p.winogradGradParts(mk, s, pl, T, x, w, sum)
	} else {
		clear(sum)
		sc := getWinogradScratch(16*min(T, pl.tiles)*cin, 16*min(T, pl.tiles)*cout)
		defer putWinogradScratch(sc)
		for t0 := 0; t0 < pl.tiles; t0 += T {
			n := min(T, pl.tiles-t0)
			winogradGradPoint(s, pl, sc, x, w, t0, n)
			p.ParallelRange(n, 16, func(lo, hi int) {
				winogradInput(sc.in[16*lo:], hi-lo, cin, sc.v[lo*cin:], n*cin)
				winogradFilter(sc.out[4*lo:], hi-lo, cout, sc.m[lo*cout:], n*cout)
			})
			p.ParallelFor(16, func(k int) {
				winogradGradProducts(mk, sc, cin, cout, n, k, sum)
			})
		}
	}
	ys := s.YStrides
	plane := cin * cout
	p.ParallelRange(cin, 8, func(lo, hi int) {
		var outs [9]unsafe.Pointer
		for c := lo; c < hi; c++ {
			for a := range 3 {
				for b := range 3 {
					outs[3*a+b] = unsafe.Pointer(&y[c*ys.Major+a*ys.Spatial[pl.da]+b*ys.Spatial[pl.db]])
				}
			}
			winogradGradOutput(sum[c*cout:], plane, cout, &outs)
		}
	})
}

// winogradPartSums bounds the sums (16·Batch·OutChannels floats) for which the tiles are cut
// into winogradParts fixed parts, each summed apart by one thread without hand-offs and then
// added in order: narrow layers' blocks are too quick for two hand-offs each.
const winogradPartSums = 1 << 18

// winogradParts is how many parts: a fixed number (so the sums' order does not depend on the
// thread count) several times any thread count here, so threads that start late take fewer.
const winogradParts = 8

// winogradGradParts sums the kernel gradient's products over winogradParts parts of the tiles,
// in parallel and T tiles at a time, into sum, for layers whose sums are small.
func (p *Pool) winogradGradParts(mk *microKernel, s *ConvShape, pl winogradGradPlan, T int, x, w, sum []float32) {
	cin, cout := s.Batch, s.OutChannels
	size := 16 * cin * cout
	parts := make([][]float32, winogradParts)
	parts[0] = sum
	for i := 1; i < len(parts); i++ {
		parts[i] = floats.get(size)
		defer floats.put(parts[i])
	}
	p.ParallelFor(len(parts), func(part int) {
		lo, hi := part*pl.tiles/len(parts), (part+1)*pl.tiles/len(parts)
		clear(parts[part])
		if lo == hi {
			return
		}
		sc := getWinogradScratch(16*min(T, hi-lo)*cin, 16*min(T, hi-lo)*cout)
		defer putWinogradScratch(sc)
		for t0 := lo; t0 < hi; t0 += T {
			n := min(T, hi-t0)
			winogradGradPoint(s, pl, sc, x, w, t0, n)
			winogradInput(sc.in, n, cin, sc.v, n*cin)
			winogradFilter(sc.out, n, cout, sc.m, n*cout)
			for k := range 16 {
				winogradGradProducts(mk, sc, cin, cout, n, k, parts[part])
			}
		}
	})
	p.ParallelRange(size, 4096, func(lo, hi int) {
		for _, part := range parts[1:] {
			Binary(OpAdd, sum[lo:hi], sum[lo:hi], part[lo:hi])
		}
	})
}

// winogradGradProducts adds position k's product of a block of n transformed tiles into sum.
func winogradGradProducts(mk *microKernel, sc *winogradScratch, cin, cout, n, k int, sum []float32) {
	a := Strided{Data: sc.v, Off: k * n * cin, RowStride: 1, DepthStride: cin}
	b := Strided{Data: sc.m, Off: k * n * cout, RowStride: 1, DepthStride: cout}
	gemmSerial(mk, cin, cout, n, 1, a, b, sum[k*cin*cout:], cout)
}

// winogradGradPoint sizes sc for a block of n tiles from tile t0 and points each tile's 16 inputs
// into x (zeros for padding) and its 2×2 block of w into w (zeros past its edge).
func winogradGradPoint(s *ConvShape, pl winogradGradPlan, sc *winogradScratch, x, w []float32, t0, n int) {
	cin, cout := s.Batch, s.OutChannels
	sc.in = resized(sc.in, 16*n)
	sc.out = resized(sc.out, 4*n)
	if len(sc.zero) < max(cin, cout) {
		sc.zero = make([]float32, max(cin, cout))
	}
	zero := unsafe.Pointer(&sc.zero[0])
	xs, ws := s.XStrides, s.WStrides
	inA, inB := s.In[pl.da], s.In[pl.db]
	kA, kB := s.Kernel[pl.da], s.Kernel[pl.db]
	padA, padB := s.PadLo[pl.da], s.PadLo[pl.db]
	perImage := pl.tilesA * pl.tilesB
	for i := range n {
		ins, filters := sc.in[16*i:16*i+16], sc.out[4*i:4*i+4]
		q := t0 + i
		img, r := q/perImage, q%perImage
		ta, tb := 2*(r/pl.tilesB), 2*(r%pl.tilesB)
		pointWindow(ins, 4, x, img*xs.Minor, ta-padA, tb-padB, inA, inB, xs.Spatial[pl.da], xs.Spatial[pl.db], zero)
		pointWindow(filters, 2, w, img*ws.Major, ta, tb, kA, kB, ws.Spatial[pl.da], ws.Spatial[pl.db], zero)
	}
}
