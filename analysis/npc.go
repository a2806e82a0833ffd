package analysis

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
)

// NPCMultipliers returns the negative-positive coupling multiplier of every anchor of one
// batch of N view pairs (the paper's Eq. 4): view-1 anchors 0..N-1, then view-2 anchors, the
// order trainstep's loss uses. Rows are L2-normalised first (a zero row stays zero). With
// s = <z1_i, z2_i>/τ and U the sum of exp(<z_a, z_b>/τ) over the 2N-2 views b of other
// images, q = 1 - exp(s)/(exp(s)+U) = sigmoid(log U - s), computed from a log-sum-exp so no
// temperature overflows.
func NPCMultipliers(z1, z2 [][]float64, temperature float64) ([]float64, error) {
	n := len(z1)
	switch {
	case n < 2:
		return nil, fmt.Errorf("NPC multipliers need at least 2 view pairs, got %d", n)
	case len(z2) != n:
		return nil, fmt.Errorf("z1 has %d rows but z2 has %d", n, len(z2))
	case len(z1[0]) == 0:
		return nil, fmt.Errorf("z1 row 0 is empty")
	case !(temperature > 0) || math.IsInf(temperature, 0):
		return nil, fmt.Errorf("temperature %v: want a positive number", temperature)
	}
	dim := len(z1[0])
	z := make([]float64, 0, 2*n*dim)
	for view, rows := range [][][]float64{z1, z2} {
		for i, r := range rows {
			if len(r) != dim {
				return nil, fmt.Errorf("z%d row %d has %d values, z1 row 0 has %d", view+1, i, len(r), dim)
			}
			for j, v := range r {
				if math.IsNaN(v) || math.IsInf(v, 0) {
					return nil, fmt.Errorf("z%d[%d][%d] = %v: embeddings must be finite", view+1, i, j, v)
				}
			}
			z = append(z, r...)
		}
	}
	var w npcWork
	return w.batch(z, n, dim, temperature, make([]float64, 2*n)), nil
}

// npcWork holds one worker's buffers, reused batch after batch.
type npcWork struct {
	z, sims []float64
}

// batch computes the 2N multipliers of the pairs in z (2N rows of dim values: view 1 of every
// image, then view 2) into q. It normalises z in place.
func (w *npcWork) batch(z []float64, n, dim int, temperature float64, q []float64) []float64 {
	m := 2 * n
	for a := range m {
		row := z[a*dim : (a+1)*dim]
		var s float64
		for _, v := range row {
			s += v * v
		}
		if s > 0 {
			inv := 1 / math.Sqrt(s)
			for j := range row {
				row[j] *= inv
			}
		}
	}
	if cap(w.sims) < m*m {
		w.sims = make([]float64, m*m)
	}
	sims := w.sims[:m*m]
	gramUpper(z, m, dim, sims)
	invTau := 1 / temperature
	for a := range m {
		i := a % n
		pos := a + n
		if a >= n {
			pos = a - n
		}
		// Row a holds <z_a, z_b> for b >= a; the rest is read from column a.
		sim := func(b int) float64 {
			if b >= a {
				return sims[a*m+b] * invTau
			}
			return sims[b*m+a] * invTau
		}
		maxNeg := math.Inf(-1)
		for b := range m {
			if b%n != i {
				maxNeg = max(maxNeg, sim(b))
			}
		}
		var sum float64
		for b := range m {
			if b%n != i {
				sum += math.Exp(sim(b) - maxNeg)
			}
		}
		logU := maxNeg + math.Log(sum)
		q[a] = sigmoid(logU - sim(pos))
	}
	return q
}

// sigmoid is 1/(1+e^-x), written so that neither branch overflows.
func sigmoid(x float64) float64 {
	if x >= 0 {
		return 1 / (1 + math.Exp(-x))
	}
	e := math.Exp(x)
	return e / (1 + e)
}

// gramUpper fills out[a*m+b] = <z_a, z_b> for b >= a (the upper triangle with the diagonal),
// four rows against four rows at a time.
func gramUpper(z []float64, m, dim int, out []float64) {
	a := 0
	for ; a+4 <= m; a += 4 {
		a0, a1, a2, a3 := z[a*dim:(a+1)*dim], z[(a+1)*dim:(a+2)*dim], z[(a+2)*dim:(a+3)*dim], z[(a+3)*dim:(a+4)*dim]
		b := a
		for ; b+4 <= m; b += 4 {
			b0, b1, b2, b3 := z[b*dim:(b+1)*dim], z[(b+1)*dim:(b+2)*dim], z[(b+2)*dim:(b+3)*dim], z[(b+3)*dim:(b+4)*dim]
			var c00, c01, c02, c03, c10, c11, c12, c13 float64
			var c20, c21, c22, c23, c30, c31, c32, c33 float64
			for p := range a0 {
				x0, x1, x2, x3 := a0[p], a1[p], a2[p], a3[p]
				y0, y1, y2, y3 := b0[p], b1[p], b2[p], b3[p]
				c00 += x0 * y0
				c01 += x0 * y1
				c02 += x0 * y2
				c03 += x0 * y3
				c10 += x1 * y0
				c11 += x1 * y1
				c12 += x1 * y2
				c13 += x1 * y3
				c20 += x2 * y0
				c21 += x2 * y1
				c22 += x2 * y2
				c23 += x2 * y3
				c30 += x3 * y0
				c31 += x3 * y1
				c32 += x3 * y2
				c33 += x3 * y3
			}
			copy(out[a*m+b:], []float64{c00, c01, c02, c03})
			copy(out[(a+1)*m+b:], []float64{c10, c11, c12, c13})
			copy(out[(a+2)*m+b:], []float64{c20, c21, c22, c23})
			copy(out[(a+3)*m+b:], []float64{c30, c31, c32, c33})
		}
		for ; b < m; b++ {
			zb := z[b*dim : (b+1)*dim]
			out[a*m+b] = dot64(a0, zb)
			out[(a+1)*m+b] = dot64(a1, zb)
			out[(a+2)*m+b] = dot64(a2, zb)
			out[(a+3)*m+b] = dot64(a3, zb)
		}
	}
	for ; a < m; a++ {
		za := z[a*dim : (a+1)*dim]
		for b := a; b < m; b++ {
			out[a*m+b] = dot64(za, z[b*dim:(b+1)*dim])
		}
	}
}

func dot64(x, y []float64) float64 {
	y = y[:len(x)]
	var s float64
	for p, v := range x {
		s += v * y[p]
	}
	return s
}

// NPCConfig configures NPCStatistics. The zero value of a field means its default.
type NPCConfig struct {
	BatchSizes  []int   // default 32, 64, 128, 256, 512, 1024 (the paper's Fig. 1)
	Temperature float64 // τ of the loss the embeddings were trained with; required
	Seed        uint64  // batches are drawn from a PRNG seeded by (Seed, batch size, pass)
	// Passes is how many times the pairs are shuffled and cut into batches per batch size;
	// default 1 (every pair in one batch of each size, the remainder left out).
	Passes int
	// MaxBatches caps the batches per batch size (0: no cap), to bound the work on large sets.
	MaxBatches int
	Bins       int // histogram bins on [0, 1]; default 50
	Workers    int // goroutines; default GOMAXPROCS
}

// DefaultNPCBatchSizes are the batch sizes of the paper's Fig. 1.
func DefaultNPCBatchSizes() []int { return []int{32, 64, 128, 256, 512, 1024} }

// DefaultHistogramBins is the number of histogram bins on [0, 1].
const DefaultHistogramBins = 50

// NPCQuantiles are the quantiles reported for each batch size.
var npcQuantiles = []float64{0.01, 0.05, 0.10, 0.25, 0.50, 0.75, 0.90, 0.95, 0.99}

// NPCBatches draws the batches of one batch size: per pass, a permutation of the n pairs from
// a PRNG seeded by (seed, batchSize, pass), cut into consecutive batches of batchSize, the
// remainder dropped. The same arguments always give the same batches, wherever they are
// computed.
func NPCBatches(n, batchSize int, seed uint64, passes, maxBatches int) ([][]int, error) {
	switch {
	case batchSize < 2:
		return nil, fmt.Errorf("batch size %d: want at least 2 pairs", batchSize)
	case batchSize > n:
		return nil, fmt.Errorf("batch size %d needs at least %d view pairs, have %d", batchSize, batchSize, n)
	}
	passes = max(passes, 1)
	var out [][]int
	for pass := range passes {
		r := rand.New(rand.NewPCG(seed, uint64(batchSize)<<32|uint64(pass)))
		perm := r.Perm(n)
		for from := 0; from+batchSize <= n; from += batchSize {
			if maxBatches > 0 && len(out) == maxBatches {
				return out, nil
			}
			out = append(out, perm[from:from+batchSize:from+batchSize])
		}
	}
	return out, nil
}

// NPCBatch computes the multipliers of the batch of pairs idx of z1, z2 (float32 embeddings as
// they are stored), in float64. It is the unit of work a pipeline spreads over workers.
func NPCBatch(z1, z2 Vectors, idx []int, temperature float64) []float64 {
	var w npcWork
	return w.pairs(z1, z2, idx, temperature)
}

func (w *npcWork) pairs(z1, z2 Vectors, idx []int, temperature float64) []float64 {
	n, dim := len(idx), z1.Dim
	if cap(w.z) < 2*n*dim {
		w.z = make([]float64, 2*n*dim)
	}
	z := w.z[:2*n*dim]
	for view, src := range []Vectors{z1, z2} {
		for i, row := range idx {
			dst := z[(view*n+i)*dim : (view*n+i+1)*dim]
			for j, v := range src.Row(row) {
				dst[j] = float64(v)
			}
		}
	}
	return w.batch(z, n, dim, temperature, make([]float64, 2*n))
}

// NPCStatistics samples batches of each configured size from the view pairs (row i of z1 and
// row i of z2 are the two views of example i), computes q for every anchor and summarises the
// values per batch size. source names the embeddings in errors. Workers split the batches;
// the result does not depend on their number.
func NPCStatistics(z1, z2 Vectors, source string, cfg NPCConfig) ([]NPCStats, error) {
	if len(cfg.BatchSizes) == 0 {
		cfg.BatchSizes = DefaultNPCBatchSizes()
	}
	if cfg.Bins <= 0 {
		cfg.Bins = DefaultHistogramBins
	}
	if cfg.Workers <= 0 {
		cfg.Workers = runtime.GOMAXPROCS(0)
	}
	if err := z1.Validate(source + " (view 1)"); err != nil {
		return nil, err
	}
	if err := z2.Validate(source + " (view 2)"); err != nil {
		return nil, err
	}
	switch {
	case z1.Len() != z2.Len():
		return nil, fmt.Errorf("%s: %d view-1 embeddings but %d view-2 embeddings", source, z1.Len(), z2.Len())
	case z1.Dim != z2.Dim:
		return nil, fmt.Errorf("%s: view-1 embeddings have %d dimensions, view-2 %d", source, z1.Dim, z2.Dim)
	case !(cfg.Temperature > 0) || math.IsInf(cfg.Temperature, 0):
		return nil, fmt.Errorf("temperature %v: want a positive number", cfg.Temperature)
	}
	type job struct {
		size, batch int
		idx         []int
	}
	var jobs []job
	results := make([][][]float64, len(cfg.BatchSizes))
	for s, size := range cfg.BatchSizes {
		batches, err := NPCBatches(z1.Len(), size, cfg.Seed, cfg.Passes, cfg.MaxBatches)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", source, err)
		}
		results[s] = make([][]float64, len(batches))
		for b, idx := range batches {
			jobs = append(jobs, job{s, b, idx})
		}
	}
	// Large batches first, so no worker is left with one big batch at the end.
	slices.SortStableFunc(jobs, func(a, b job) int { return len(b.idx) - len(a.idx) })
	next := make(chan job)
	var wg sync.WaitGroup
	for range cfg.Workers {
		wg.Go(func() {
			var w npcWork
			for j := range next {
				results[j.size][j.batch] = w.pairs(z1, z2, j.idx, cfg.Temperature)
			}
		})
	}
	for _, j := range jobs {
		next <- j
	}
	close(next)
	wg.Wait()

	stats := make([]NPCStats, len(cfg.BatchSizes))
	for s, size := range cfg.BatchSizes {
		var acc QAccumulator
		for _, q := range results[s] {
			acc.Add(q...)
		}
		stats[s] = acc.Stats(size, len(results[s]), cfg.Bins)
	}
	return stats, nil
}

// QAccumulator collects NPC multipliers. Accumulators of disjoint batches merge exactly, and
// the statistics are computed from the sorted values, so they do not depend on the order in
// which batches arrived or were merged.
type QAccumulator struct {
	Values []float64
}

// Add collects values.
func (a *QAccumulator) Add(q ...float64) { a.Values = append(a.Values, q...) }

// Merge collects o's values.
func (a *QAccumulator) Merge(o *QAccumulator) { a.Values = append(a.Values, o.Values...) }

// Stats summarises the collected values of one batch size, drawn from the given number of
// batches, with a histogram of bins equal bins on [0, 1].
func (a *QAccumulator) Stats(batchSize, batches, bins int) NPCStats {
	v := slices.Clone(a.Values)
	slices.Sort(v)
	st := NPCStats{BatchSize: batchSize, Batches: batches, Anchors: int64(len(v))}
	st.Histogram = NewHistogram(0, 1, max(bins, 1))
	if len(v) == 0 {
		return st
	}
	var sum float64
	for _, x := range v {
		sum += x
		st.Histogram.Add(x)
	}
	st.Mean = sum / float64(len(v))
	var ss float64
	for _, x := range v {
		ss += (x - st.Mean) * (x - st.Mean)
	}
	st.Std = math.Sqrt(ss / float64(len(v)))
	if st.Mean > 0 {
		st.CV = st.Std / st.Mean
	}
	st.Min, st.Max = v[0], v[len(v)-1]
	for _, p := range npcQuantiles {
		st.Quantiles = append(st.Quantiles, Quantile{P: p, Value: quantileSorted(v, p)})
	}
	return st
}

// NPCStats summarises the NPC multipliers of one batch size.
type NPCStats struct {
	BatchSize int     `json:"batch_size"`
	Batches   int     `json:"batches"`
	Anchors   int64   `json:"anchors"` // 2 × batch size × batches
	Mean      float64 `json:"mean"`
	// Std is the population standard deviation (divided by the number of anchors).
	Std float64 `json:"std"`
	// CV is the coefficient of variation Std/Mean (0 when the mean is 0).
	CV        float64    `json:"cv"`
	Min       float64    `json:"min"`
	Max       float64    `json:"max"`
	Quantiles []Quantile `json:"quantiles"`
	Histogram Histogram  `json:"histogram"`
}

// Quantile is the value below which a fraction P of the values lie, interpolated linearly
// between order statistics (numpy's default).
type Quantile struct {
	P     float64 `json:"p"`
	Value float64 `json:"value"`
}

func quantileSorted(v []float64, p float64) float64 {
	h := p * float64(len(v)-1)
	lo := int(math.Floor(h))
	hi := min(lo+1, len(v)-1)
	return v[lo] + (h-float64(lo))*(v[hi]-v[lo])
}

// Histogram counts values in equal bins on [Lo, Hi]; bin i is [Lo+i·w, Lo+(i+1)·w), the last
// bin includes Hi, and values outside the range are counted in Under and Over (NaN in Over).
type Histogram struct {
	Lo     float64 `json:"lo"`
	Hi     float64 `json:"hi"`
	Counts []int64 `json:"counts"`
	Under  int64   `json:"under,omitempty"`
	Over   int64   `json:"over,omitempty"`
}

// NewHistogram returns an empty histogram of bins equal bins on [lo, hi].
func NewHistogram(lo, hi float64, bins int) Histogram {
	return Histogram{Lo: lo, Hi: hi, Counts: make([]int64, bins)}
}

// Add counts x.
func (h *Histogram) Add(x float64) {
	switch {
	case x < h.Lo:
		h.Under++
	case x > h.Hi || math.IsNaN(x):
		h.Over++
	default:
		i := int((x - h.Lo) / (h.Hi - h.Lo) * float64(len(h.Counts)))
		h.Counts[min(i, len(h.Counts)-1)]++
	}
}

// Total returns the number of values counted, in range or not.
func (h Histogram) Total() int64 {
	t := h.Under + h.Over
	for _, c := range h.Counts {
		t += c
	}
	return t
}
