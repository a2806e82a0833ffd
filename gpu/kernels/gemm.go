package kernels

import (
	"fmt"
	"sync"
	"unsafe"
)

// Block sizes of the packed matrix multiply (Goto/BLIS loop order): a kc×nr panel of B stays in
// L1 while a mc×kc block of A sits in L2 and a kc×nc block of B in L3.
const (
	blockK = 256
	blockM = 144 // a multiple of every micro-kernel's mr (4, 6, 12, 16)
	blockN = 2048
)

// PanelSource is one operand of a matrix product, read through its packing: Pack writes the
// rows [r0, r0+rows) over depth [p0, p0+kc) as ceil(rows/w) panels of w rows, each panel laid
// out depth-major ([kc][w], the w values of one depth contiguous), rows past the end zero,
// every value multiplied by scale. For the left operand A (m×k) rows are A's rows; for the
// right operand B (k×n) rows are B's columns. Convolutions implement it to pack straight from
// the image (implicit im2col).
type PanelSource interface {
	Pack(dst []float32, r0, rows, p0, kc, w int, scale float32)
}

// Strided is a PanelSource over a dense matrix: element (r, p) is Data[Off + r*RowStride +
// p*DepthStride]. A row-major m×k matrix A with leading dimension lda is Strided{a, 0, lda, 1};
// its transpose is Strided{a, 0, 1, lda}.
type Strided struct {
	Data                   []float32
	Off                    int
	RowStride, DepthStride int
}

// Pack implements PanelSource.
func (s Strided) Pack(dst []float32, r0, rows, p0, kc, w int, scale float32) {
	panels := (rows + w - 1) / w
	if s.RowStride == 1 && scale == 1 && rows >= 2*w {
		s.packContiguousRows(dst, r0, rows, p0, kc, w)
		return
	}
	for pi := range panels {
		panel := dst[pi*kc*w : (pi+1)*kc*w]
		rBase := r0 + pi*w
		valid := min(w, r0+rows-rBase)
		switch {
		case s.RowStride == 1 && valid == w:
			// The w rows of one depth are contiguous: one copy per depth.
			for p := range kc {
				src := s.Data[s.Off+rBase+(p0+p)*s.DepthStride:][:w]
				d := panel[p*w : p*w+w]
				switch {
				case scale == 1 && w == 32:
					*(*[32]float32)(d) = *(*[32]float32)(src)
				case scale == 1 && w == 16:
					*(*[16]float32)(d) = *(*[16]float32)(src)
				case scale == 1:
					copy(d, src)
				default:
					for i, v := range src {
						d[i] = v * scale
					}
				}
			}
		case s.DepthStride == 1 && valid == w && scale == 1:
			// Each row is contiguous along the depth: transpose. One depth at a time, the panel
			// is written in order and the w rows are read at one position each; the reads go
			// through pointers because bounds checks would cost as much as the copy.
			base := unsafe.Pointer(&s.Data[s.Off+rBase*s.RowStride+p0])
			last := s.Off + (rBase+w-1)*s.RowStride + p0 + kc - 1
			_ = s.Data[last] // every read below lies within the slice
			step := uintptr(4 * s.RowStride)
			for p := range kc {
				d := panel[p*w : p*w+w]
				src := unsafe.Add(base, 4*p)
				for i := range d {
					d[i] = *(*float32)(unsafe.Add(src, uintptr(i)*step))
				}
			}
		case s.DepthStride == 1:
			// Each row is contiguous along the depth: transpose it into the panel.
			for i := range valid {
				src := s.Data[s.Off+(rBase+i)*s.RowStride+p0:][:kc]
				if scale == 1 {
					for p, v := range src {
						panel[p*w+i] = v
					}
				} else {
					for p, v := range src {
						panel[p*w+i] = v * scale
					}
				}
			}
			if valid < w {
				for p := range kc {
					clear(panel[p*w+valid : p*w+w])
				}
			}
		default:
			for p := range kc {
				d := panel[p*w : p*w+w]
				base := s.Off + (p0+p)*s.DepthStride + rBase*s.RowStride
				for i := range valid {
					d[i] = s.Data[base+i*s.RowStride] * scale
				}
				clear(d[valid:])
			}
		}
	}
}

// packContiguousRows packs rows that are contiguous at each depth (B's columns, B row-major)
// one depth at a time across every panel: the reads then run along one row of the matrix,
// where the panel-at-a-time order would jump a whole row (often a page) per depth and defeat
// the hardware prefetcher.
func (s Strided) packContiguousRows(dst []float32, r0, rows, p0, kc, w int) {
	full := rows / w
	for p := range kc {
		src := s.Data[s.Off+r0+(p0+p)*s.DepthStride:][:rows]
		for pi := range full {
			d := dst[(pi*kc+p)*w:][:w]
			switch w {
			case 32:
				*(*[32]float32)(d) = *(*[32]float32)(src[pi*w:])
			case 16:
				*(*[16]float32)(d) = *(*[16]float32)(src[pi*w:])
			default:
				copy(d, src[pi*w:pi*w+w])
			}
		}
		if rest := rows - full*w; rest > 0 {
			d := dst[(full*kc+p)*w:][:w]
			copy(d, src[full*w:])
			clear(d[rest:])
		}
	}
}

// microKernel computes one mr×nr tile: C += A·B for packed panels a ([kc][mr]) and b ([kc][nr]),
// C row-major with row stride ldc (in elements). Implementations never read C outside the tile.
type microKernel struct {
	name   string
	mr, nr int
	fn     func(kc int, a, b, c unsafe.Pointer, ldc int)
	// indirect computes the same tile with A's rows read in place: C += Σ over nseg segments of
	// A_seg·B_seg, row i of A_seg being the kc floats that end at x + 4·offs[seg·mr+i] (zero's
	// kc floats when the offset is negative), B_seg the next kc rows of b, packed [kc][nr].
	indirect func(nseg, kc int, offs *int64, x, zero, b, c unsafe.Pointer, ldc int)
	// gather, when set, copies runs of n ≤ 16 floats: dst[p·w : p·w+n] = x[offs[p]:][:n] (zeros
	// where offs[p] < 0) for p < kc. Without it packing copies in Go.
	gather func(dst *float32, w int, x *float32, offs *int64, kc, n int)
}

// scratch holds one thread's packing buffers and an edge tile.
type scratch struct {
	a, b, tile []float32
}

var scratchPool = sync.Pool{New: func() any {
	return &scratch{
		a:    make([]float32, blockM*blockK+64),
		b:    make([]float32, blockK*blockN+64),
		tile: make([]float32, 16*64),
	}
}}

// aligned returns s from its first 64-byte aligned element.
func aligned(s []float32) []float32 {
	off := (64 - int(uintptr(unsafe.Pointer(&s[0]))%64)) % 64 / 4
	return s[off:]
}

// gemmSerial computes C += A·B on the calling goroutine: C is m×n at c[0] with row stride ldc,
// A (m×k) and B (k×n, rows = columns of B) are read through their packing; alpha is applied
// while packing A.
func gemmSerial(mk *microKernel, m, n, k int, alpha float32, a, b PanelSource, c []float32, ldc int) {
	if m == 0 || n == 0 || k == 0 {
		return
	}
	s := scratchPool.Get().(*scratch)
	defer scratchPool.Put(s)
	ap, bp := aligned(s.a), aligned(s.b)
	for jc := 0; jc < n; jc += blockN {
		nc := min(blockN, n-jc)
		for pc := 0; pc < k; pc += blockK {
			kc := min(blockK, k-pc)
			b.Pack(bp, jc, nc, pc, kc, mk.nr, 1)
			gemmBlock(mk, 0, m, jc, nc, pc, kc, alpha, a, ap, bp, s.tile, c, ldc)
		}
	}
}

// gemmBlock adds rows [i0, i1) of A·B over depth [pc, pc+kc) into C's columns [jc, jc+nc),
// B's kc×nc block being packed in bp: A is packed blockM rows at a time into ap, and the
// micro-kernel runs over the tiles, through tile where a tile crosses C's edge.
func gemmBlock(mk *microKernel, i0, i1, jc, nc, pc, kc int, alpha float32, a PanelSource, ap, bp, tileBuf, c []float32, ldc int) {
	mr, nr := mk.mr, mk.nr
	tile := tileBuf[:mr*nr]
	for ic := i0; ic < i1; ic += blockM {
		mc := min(blockM, i1-ic)
		a.Pack(ap, ic, mc, pc, kc, mr, alpha)
		for jr := 0; jr < nc; jr += nr {
			nv := min(nr, nc-jr)
			bPanel := unsafe.Pointer(&bp[(jr/nr)*kc*nr])
			for ir := 0; ir < mc; ir += mr {
				mv := min(mr, mc-ir)
				aPanel := unsafe.Pointer(&ap[(ir/mr)*kc*mr])
				ci := (ic+ir)*ldc + jc + jr
				if mv == mr && nv == nr {
					mk.fn(kc, aPanel, bPanel, unsafe.Pointer(&c[ci]), ldc)
					continue
				}
				clear(tile)
				mk.fn(kc, aPanel, bPanel, unsafe.Pointer(&tile[0]), nr)
				for i := range mv {
					row := c[ci+i*ldc : ci+i*ldc+nv]
					for j, v := range tile[i*nr : i*nr+nv] {
						row[j] += v
					}
				}
			}
		}
	}
}

// gemmSharedB splits C's rows between the pool's threads, which share each packed block of B
// (BLIS's scheme): together they pack B's kc×nc blocks, then each multiplies its rows by them.
// Every thread reads the same B panels from the shared cache instead of packing and holding a
// copy of its own, which on two cores with a small shared cache decides how well the product
// scales. Up to sharedBDepth of depth is packed at once, so a product of ordinary depth needs
// two hand-offs between the threads, not two per depth block. Each element of C is still
// computed by one thread in a fixed order.
func (p *Pool) gemmSharedB(mk *microKernel, m, n, k int, alpha float32, a, b PanelSource, c []float32, ldc int) {
	mr, nr := mk.mr, mk.nr
	rows := splitPoints(m, p.threads, mr)
	width := min(n, blockN)
	width = (width + nr - 1) / nr * nr
	bpBuf := floats.get(min(k, sharedBDepth)*width + 64)
	defer floats.put(bpBuf)
	bp := aligned(bpBuf)
	for jc := 0; jc < n; jc += blockN {
		nc := min(blockN, n-jc)
		ncPanels := (nc + nr - 1) / nr
		panels := splitPoints(ncPanels, p.threads, 1)
		for pg := 0; pg < k; pg += sharedBDepth {
			depth := min(sharedBDepth, k-pg)
			// Block pc's panels start at (pc−pg)·ncPanels·nr, as gemmBlock reads one block.
			p.ParallelFor(len(panels)-1, func(t int) {
				lo, hi := panels[t], panels[t+1]
				for pc := pg; pc < pg+depth; pc += blockK {
					kc := min(blockK, pg+depth-pc)
					b.Pack(bp[(pc-pg)*ncPanels*nr+lo*kc*nr:], jc+lo*nr, min(nc, hi*nr)-lo*nr, pc, kc, nr, 1)
				}
			})
			p.ParallelFor(len(rows)-1, func(t int) {
				s := scratchPool.Get().(*scratch)
				defer scratchPool.Put(s)
				for pc := pg; pc < pg+depth; pc += blockK {
					kc := min(blockK, pg+depth-pc)
					gemmBlock(mk, rows[t], rows[t+1], jc, nc, pc, kc, alpha, a, aligned(s.a), bp[(pc-pg)*ncPanels*nr:], s.tile, c, ldc)
				}
			})
		}
	}
}

// sharedBDepth is how much of B's depth gemmSharedB packs at once (a multiple of blockK): a
// block of 1024 rows of 2048 columns is 8 MiB, within a server's shared cache.
const sharedBDepth = 4 * blockK

// minParallelFlops is the size (m·n·k) under which a product runs on one thread: below it the
// hand-off costs more than it saves.
const minParallelFlops = 1 << 17

// Gemm computes C = alpha·A·B + beta·C with A (m×k) and B (k×n) read through their packing and
// C row-major (row stride ldc) at c[0], in parallel on the pool. A deep, narrow product
// (isDeep) is split along k in deepParts fixed parts (gemmSplitK), on any number of threads; otherwise the
// work is split along m where C has rows enough (the threads share B's packing, gemmSharedB),
// else along n or k, whichever repeats the least work: along n every thread packs all of A,
// along k each thread sums into its own copy of C.
func (p *Pool) Gemm(m, n, k int, alpha float32, a, b PanelSource, beta float32, c []float32, ldc int) {
	if m < 0 || n < 0 || k < 0 {
		panic(fmt.Sprintf("kernels.Gemm: negative size m=%d n=%d k=%d", m, n, k))
	}
	if m == 0 || n == 0 {
		return
	}
	if len(c) < (m-1)*ldc+n || ldc < n {
		panic(fmt.Sprintf("kernels.Gemm: C has %d elements, needs %d rows of %d with row stride %d", len(c), m, n, ldc))
	}
	scaleC(c, m, n, ldc, beta)
	if k == 0 || alpha == 0 {
		return
	}
	mk := p.kernel
	threads := p.threads
	if m*n*k < minParallelFlops {
		gemmSerial(mk, m, n, k, alpha, a, b, c, ldc)
		return
	}
	if isDeep(m, n, k) {
		p.gemmSplitK(mk, deepParts, m, n, k, alpha, a, b, c, ldc)
		return
	}
	if threads == 1 {
		gemmSerial(mk, m, n, k, alpha, a, b, c, ldc)
		return
	}
	// Extra packing (or reduction) work each split costs, in elements; infeasible splits (too
	// little work per thread along that dimension) cost the maximum.
	const inf = int(^uint(0) >> 1)
	costM, costN, costK := inf, inf, inf
	if m >= threads*mk.mr*2 {
		costM = 0
	}
	if n >= threads*mk.nr*2 {
		costN = (threads - 1) * m * k
	}
	if k >= threads*blockK {
		costK = (threads - 1) * m * n * 2
	}
	switch {
	case costM == inf && costN == inf && costK == inf:
		gemmSerial(mk, m, n, k, alpha, a, b, c, ldc)
	case costM <= costN && costM <= costK:
		p.gemmSharedB(mk, m, n, k, alpha, a, b, c, ldc)
	case costN <= costK:
		parts := splitPoints(n, threads, mk.nr)
		p.ParallelFor(len(parts)-1, func(t int) {
			lo, hi := parts[t], parts[t+1]
			gemmSerial(mk, m, hi-lo, k, alpha, a, offsetRows{b, lo}, c[lo:], ldc)
		})
	default:
		p.gemmSplitK(mk, threads, m, n, k, alpha, a, b, c, ldc)
	}
}

// deepParts is how many parts of its depth a deep product (isDeep) is cut into: a fixed number,
// so the sums' order does not depend on the thread count, and several times any thread count
// here, so a thread that starts late takes fewer.
const deepParts = 8

// deepMaxOutput bounds C's size (m·n) for the depth split: each part past the first sums into
// a buffer of C's size.
const deepMaxOutput = 1 << 18

// isDeep reports whether a product is deep and narrow: C small, the depth long enough for
// deepParts parts of at least a packed block each. GoMLX's kernel gradients of 1×1 and strided
// convolutions over large images are such products (C is input × output channels, the depth
// is every pixel of the batch). Split by rows, threads would hand off twice per packed block
// of B and share a few micro-kernel panels of C's rows unevenly; split by depth, each thread
// streams its own parts of A and B with no hand-off. Whether a product is deep depends on its
// sizes only, so a result is the same on any number of threads.
func isDeep(m, n, k int) bool {
	return m*n <= deepMaxOutput && k >= deepParts*blockK
}

// gemmSplitK cuts the depth k into up to parts ranges computed in parallel: the first adds into
// C, the others into zeroed buffers that are then added into C in order, row blocks in
// parallel. With parts fixed by the sizes (a deep product's deepParts) the sums do not depend
// on the thread count; with parts = the thread count each thread takes one range.
func (p *Pool) gemmSplitK(mk *microKernel, parts, m, n, k int, alpha float32, a, b PanelSource, c []float32, ldc int) {
	ranges := splitPoints(k, parts, blockK)
	partial := make([][]float32, len(ranges)-1)
	p.ParallelFor(len(ranges)-1, func(t int) {
		lo, hi := ranges[t], ranges[t+1]
		if t == 0 {
			gemmSerial(mk, m, n, hi-lo, alpha, a, b, c, ldc)
			return
		}
		buf := floats.get(m * n)
		clear(buf)
		gemmSerial(mk, m, n, hi-lo, alpha, offsetDepth{a, lo}, offsetDepth{b, lo}, buf, n)
		partial[t] = buf
	})
	defer func() {
		for _, buf := range partial[1:] {
			floats.put(buf)
		}
	}()
	p.ParallelRange(m, 16, func(lo, hi int) {
		for _, buf := range partial[1:] {
			for i := lo; i < hi; i++ {
				row := c[i*ldc : i*ldc+n]
				for j, v := range buf[i*n : i*n+n] {
					row[j] += v
				}
			}
		}
	})
}

// splitPoints cuts [0, n) into up to parts ranges whose inner boundaries are multiples of unit.
func splitPoints(n, parts, unit int) []int {
	units := (n + unit - 1) / unit
	parts = max(1, min(parts, units))
	pts := make([]int, parts+1)
	for i := 1; i < parts; i++ {
		pts[i] = i * units / parts * unit
	}
	pts[parts] = n
	return pts
}

// offsetRows shifts a PanelSource's rows.
type offsetRows struct {
	src PanelSource
	off int
}

func (o offsetRows) Pack(dst []float32, r0, rows, p0, kc, w int, scale float32) {
	o.src.Pack(dst, r0+o.off, rows, p0, kc, w, scale)
}

// offsetDepth shifts a PanelSource's depth.
type offsetDepth struct {
	src PanelSource
	off int
}

func (o offsetDepth) Pack(dst []float32, r0, rows, p0, kc, w int, scale float32) {
	o.src.Pack(dst, r0, rows, p0+o.off, kc, w, scale)
}

// scaleC multiplies the m×n matrix C by beta (beta 0 writes zeros, so NaNs in C vanish, as BLAS).
func scaleC(c []float32, m, n, ldc int, beta float32) {
	if beta == 1 {
		return
	}
	for i := range m {
		row := c[i*ldc : i*ldc+n]
		if beta == 0 {
			clear(row)
			continue
		}
		for j := range row {
			row[j] *= beta
		}
	}
}

// Sgemm computes C = alpha·op(A)·op(B) + beta·C for row-major float32 matrices, as cblas_sgemm
// with CblasRowMajor: op(A) is m×k (A itself, row stride lda, or A's transpose when transA, A
// then being k×m), op(B) is k×n (B, or the transpose of the n×k matrix B when transB), C is m×n
// with row stride ldc. It runs in parallel on DefaultPool. It panics when a slice is too short
// for its sizes and strides.
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	DefaultPool().Sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// Sgemm is the package-level Sgemm on this pool.
func (p *Pool) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	checkMatrix("A", transA, m, k, a, lda)
	checkMatrix("B", transB, k, n, b, ldb)
	var as, bs Strided
	if transA {
		as = Strided{Data: a, RowStride: 1, DepthStride: lda}
	} else {
		as = Strided{Data: a, RowStride: lda, DepthStride: 1}
	}
	if transB {
		bs = Strided{Data: b, RowStride: ldb, DepthStride: 1}
	} else {
		bs = Strided{Data: b, RowStride: 1, DepthStride: ldb}
	}
	p.Gemm(m, n, k, alpha, as, bs, beta, c, ldc)
}

// checkMatrix panics unless x holds op(x), a rows×cols matrix stored row-major with row stride
// ld (transposed: x is cols×rows).
func checkMatrix(name string, trans bool, rows, cols int, x []float32, ld int) {
	r, c := rows, cols
	if trans {
		r, c = cols, rows
	}
	if r == 0 || c == 0 {
		return
	}
	if ld < c || len(x) < (r-1)*ld+c {
		panic(fmt.Sprintf("kernels.Sgemm: %s (transposed %v) is %d×%d with row stride %d but has %d elements", name, trans, r, c, ld, len(x)))
	}
}

// GemmBatch computes batch independent products C_i = alpha·A_i·B_i + beta·C_i, C_i being the
// m×n matrix at c[i·cStride] with row stride ldc. Large products run one after another, each
// on every thread; small ones run side by side, one per thread.
func (p *Pool) GemmBatch(batch, m, n, k int, alpha float32, a, b func(i int) PanelSource, beta float32, c []float32, ldc, cStride int) {
	if batch == 1 || p.threads == 1 || m*n*k >= 4*minParallelFlops {
		for i := range batch {
			p.Gemm(m, n, k, alpha, a(i), b(i), beta, c[i*cStride:], ldc)
		}
		return
	}
	mk := p.kernel
	p.ParallelFor(batch, func(i int) {
		ci := c[i*cStride:]
		scaleC(ci, m, n, ldc, beta)
		if k > 0 && alpha != 0 {
			gemmSerial(mk, m, n, k, alpha, a(i), b(i), ci, ldc)
		}
	})
}
