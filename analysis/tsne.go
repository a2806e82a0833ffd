package analysis

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
)

// TSNEConfig are the settings of exact t-SNE (van der Maaten and Hinton, 2008), with the
// optimiser of van der Maaten's reference implementation: early exaggeration, momentum and
// per-coordinate gains.
type TSNEConfig struct {
	// Perplexity is the effective number of neighbours each point's Gaussian keeps (30).
	Perplexity float64
	// Iterations of gradient descent (1000); the first ExaggerationIters multiply P by
	// Exaggeration (250 and 12), which lets clusters form before they settle.
	Iterations        int
	ExaggerationIters int
	Exaggeration      float64
	// LearningRate; 0 takes max(N/Exaggeration/4, 50), the rule of Belkina et al. (2019)
	// that scikit-learn's "auto" uses: a fixed 200 leaves large sets badly converged.
	LearningRate float64
	// Normalize L2-normalises the vectors first, so that distances are those of the cosine
	// similarity that kNN uses on the same features.
	Normalize bool
	// Seed draws the initial layout; the same seed and input give the same layout.
	Seed uint64
	// Workers are the goroutines (0: GOMAXPROCS). The result does not depend on them: every
	// sum is made by one goroutine, in the same order.
	Workers int
}

// DefaultTSNEConfig is perplexity 30, 1000 iterations (250 exaggerated by 12), the automatic
// learning rate, on L2-normalised vectors.
func DefaultTSNEConfig() TSNEConfig {
	return TSNEConfig{Perplexity: 30, Iterations: 1000, ExaggerationIters: 250, Exaggeration: 12, Normalize: true, Seed: 1}
}

// MaxTSNEPoints bounds exact t-SNE's input: it holds the N×N affinities (8·N² bytes, 800 MB
// at this bound) and every iteration visits every pair.
const MaxTSNEPoints = 10000

// TSNEResult is a two-dimensional layout, one point per input vector, centred on the origin.
type TSNEResult struct {
	X, Y []float64
	// KL is the Kullback–Leibler divergence of the layout's affinities from the input's, the
	// objective t-SNE minimises (lower is a more faithful layout).
	KL float64
}

// TSNE lays the vectors out in two dimensions with exact t-SNE. source names the vectors in
// errors. A cancelled ctx stops it within a row of the affinities or an iteration (a second
// or so at MaxTSNEPoints), with ctx's error.
func TSNE(ctx context.Context, v Vectors, cfg TSNEConfig, source string) (TSNEResult, error) {
	n := v.Len()
	switch {
	case n == 0:
		return TSNEResult{}, fmt.Errorf("%s: no vectors to lay out", source)
	case n > MaxTSNEPoints:
		return TSNEResult{}, fmt.Errorf("%s: %d vectors, exact t-SNE takes at most %d (sample fewer per class)", source, n, MaxTSNEPoints)
	case !(cfg.Perplexity > 0) || cfg.Iterations < 1 || cfg.ExaggerationIters < 0 || !(cfg.Exaggeration >= 1) || cfg.LearningRate < 0:
		return TSNEResult{}, fmt.Errorf("t-SNE settings %+v: want a positive perplexity, at least one iteration, an exaggeration ≥ 1 and a learning rate ≥ 0", cfg)
	}
	if float64(n-1) < 3*cfg.Perplexity {
		// With fewer than 3·perplexity neighbours the calibration cannot reach the entropy it
		// asks for; the usual rule lowers the perplexity rather than refusing small sets.
		cfg.Perplexity = max(1, float64(n-1)/3)
	}
	if err := v.Validate(source); err != nil {
		return TSNEResult{}, err
	}
	if cfg.Workers <= 0 {
		cfg.Workers = runtime.GOMAXPROCS(0)
	}
	if cfg.LearningRate == 0 {
		cfg.LearningRate = max(float64(n)/cfg.Exaggeration/4, 50)
	}
	if cfg.Normalize {
		v = Vectors{Dim: v.Dim, Data: append([]float32(nil), v.Data...)}
		for i := range n {
			normalize(v.Row(i))
		}
	}
	if n == 1 {
		return TSNEResult{X: []float64{0}, Y: []float64{0}}, nil
	}
	p := affinities(ctx, v, cfg.Perplexity, cfg.Workers)
	if err := ctx.Err(); err != nil {
		return TSNEResult{}, err
	}
	return optimize(ctx, p, n, cfg)
}

// parallelRows runs f on rows [0, n) split into contiguous ranges, one per worker.
func parallelRows(n, workers int, f func(from, to int)) {
	workers = max(1, min(workers, n))
	var wg sync.WaitGroup
	for w := range workers {
		from, to := w*n/workers, (w+1)*n/workers
		wg.Go(func() { f(from, to) })
	}
	wg.Wait()
}

// affinities returns the symmetric joint probabilities P (N×N, row-major, zero diagonal,
// summing to 1): each row's Gaussian conditional p_j|i has the precision that gives it the
// perplexity's entropy, and p_ij = (p_j|i + p_i|j) / 2N.
func affinities(ctx context.Context, v Vectors, perplexity float64, workers int) []float64 {
	n := v.Len()
	p := make([]float64, n*n)
	target := math.Log(perplexity)
	parallelRows(n, workers, func(from, to int) {
		d := make([]float64, n)
		for i := from; i < to && ctx.Err() == nil; i++ {
			a := v.Row(i)
			for j := range n {
				if j == i {
					continue
				}
				b := v.Row(j)
				s := 0.0
				for k, x := range a {
					t := float64(x) - float64(b[k])
					s += t * t
				}
				d[j] = s
			}
			conditional(d, i, target, p[i*n:(i+1)*n])
		}
	})
	for i := range n {
		for j := i + 1; j < n; j++ {
			s := (p[i*n+j] + p[j*n+i]) / float64(2*n)
			p[i*n+j], p[j*n+i] = s, s
		}
	}
	return p
}

// conditional writes p_j|i ∝ exp(-β d_ij) into row (row[i] = 0), with β found by bisection so
// that the distribution's entropy is target (nats).
func conditional(d []float64, i int, target float64, row []float64) {
	// Shifting the distances by their minimum changes nothing after normalisation and keeps
	// exp from underflowing to an all-zero row when every neighbour is far.
	minD := math.Inf(1)
	for j, x := range d {
		if j != i {
			minD = min(minD, x)
		}
	}
	beta, lo, hi := 1.0, 0.0, math.Inf(1)
	for range 200 {
		sum, dot := 0.0, 0.0
		for j, x := range d {
			if j == i {
				row[j] = 0
				continue
			}
			e := math.Exp(-beta * (x - minD))
			row[j] = e
			sum += e
			dot += e * (x - minD)
		}
		// Entropy of p = e/sum: H = log(sum) + β·Σ p·d.
		h := math.Log(sum) + beta*dot/sum
		for j := range row {
			row[j] /= sum
		}
		diff := h - target
		if math.Abs(diff) < 1e-5 {
			return
		}
		if diff > 0 { // too flat: sharpen
			lo = beta
			if math.IsInf(hi, 1) {
				beta *= 2
			} else {
				beta = (beta + hi) / 2
			}
		} else {
			hi = beta
			beta = (beta + lo) / 2
		}
	}
}

// optimize runs t-SNE's gradient descent on P from a seeded layout, until ctx is cancelled.
func optimize(ctx context.Context, p []float64, n int, cfg TSNEConfig) (TSNEResult, error) {
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x75e6e))
	y := make([]float64, 2*n)
	for i := range y {
		y[i] = 1e-4 * rng.NormFloat64()
	}
	update := make([]float64, 2*n)
	gains := make([]float64, 2*n)
	for i := range gains {
		gains[i] = 1
	}
	grad := make([]float64, 2*n)
	rowZ := make([]float64, n)
	for it := range cfg.Iterations {
		if err := ctx.Err(); err != nil {
			return TSNEResult{}, err
		}
		exaggeration, momentum := 1.0, 0.8
		if it < cfg.ExaggerationIters {
			exaggeration, momentum = cfg.Exaggeration, 0.5
		}
		z := studentZ(y, n, rowZ, cfg.Workers)
		parallelRows(n, cfg.Workers, func(from, to int) {
			for i := from; i < to; i++ {
				yi0, yi1 := y[2*i], y[2*i+1]
				g0, g1 := 0.0, 0.0
				pi := p[i*n : (i+1)*n]
				for j := range n {
					if j == i {
						continue
					}
					d0, d1 := yi0-y[2*j], yi1-y[2*j+1]
					w := 1 / (1 + d0*d0 + d1*d1)
					f := (exaggeration*pi[j] - w/z) * w
					g0 += f * d0
					g1 += f * d1
				}
				grad[2*i], grad[2*i+1] = 4*g0, 4*g1
			}
		})
		for k := range y {
			// Gains grow where the gradient keeps pointing against the last step's direction
			// (the step was too timid) and shrink where it flips.
			if (grad[k] > 0) != (update[k] > 0) {
				gains[k] += 0.2
			} else {
				gains[k] = max(gains[k]*0.8, 0.01)
			}
			update[k] = momentum*update[k] - cfg.LearningRate*gains[k]*grad[k]
			y[k] += update[k]
		}
		center(y, n)
	}
	res := TSNEResult{X: make([]float64, n), Y: make([]float64, n)}
	for i := range n {
		res.X[i], res.Y[i] = y[2*i], y[2*i+1]
	}
	res.KL = klDivergence(p, y, n, rowZ, cfg.Workers)
	return res, nil
}

// studentZ returns Z = Σ_{i≠j} 1/(1+|y_i-y_j|²), the normaliser of the layout's affinities
// q_ij; rowZ holds the per-row sums, which are added in row order so that Z does not depend
// on the number of workers.
func studentZ(y []float64, n int, rowZ []float64, workers int) float64 {
	parallelRows(n, workers, func(from, to int) {
		for i := from; i < to; i++ {
			s := 0.0
			for j := range n {
				if j != i {
					d0, d1 := y[2*i]-y[2*j], y[2*i+1]-y[2*j+1]
					s += 1 / (1 + d0*d0 + d1*d1)
				}
			}
			rowZ[i] = s
		}
	})
	z := 0.0
	for _, s := range rowZ {
		z += s
	}
	return z
}

// klDivergence is KL(P‖Q) of the layout y.
func klDivergence(p, y []float64, n int, rowZ []float64, workers int) float64 {
	z := studentZ(y, n, rowZ, workers)
	parallelRows(n, workers, func(from, to int) {
		for i := from; i < to; i++ {
			s := 0.0
			for j := range n {
				if pij := p[i*n+j]; j != i && pij > 0 {
					d0, d1 := y[2*i]-y[2*j], y[2*i+1]-y[2*j+1]
					q := 1 / (1 + d0*d0 + d1*d1) / z
					s += pij * math.Log(pij/q)
				}
			}
			rowZ[i] = s
		}
	})
	kl := 0.0
	for _, s := range rowZ {
		kl += s
	}
	return kl
}

// center moves the layout's mean to the origin (t-SNE's gradient does not see translations,
// so the layout would otherwise drift).
func center(y []float64, n int) {
	m0, m1 := 0.0, 0.0
	for i := range n {
		m0 += y[2*i]
		m1 += y[2*i+1]
	}
	m0, m1 = m0/float64(n), m1/float64(n)
	for i := range n {
		y[2*i] -= m0
		y[2*i+1] -= m1
	}
}

// NeighbourAgreement is the fraction of points whose k nearest neighbours in the layout
// mostly share their label (a majority vote of the k neighbours predicts the point's label):
// how well a layout keeps classes apart. Ties go to the lower label.
func NeighbourAgreement(x, y []float64, labels []int32, k int) (float64, error) {
	n := len(x)
	if len(y) != n || len(labels) != n {
		return 0, fmt.Errorf("%d x, %d y and %d labels: want one of each per point", len(x), len(y), len(labels))
	}
	if k < 1 || k >= n {
		return 0, errors.New("k must be between 1 and the number of points − 1")
	}
	hits := 0
	d := make([]float64, n)
	idx := make([]int, n)
	for i := range n {
		for j := range n {
			d0, d1 := x[i]-x[j], y[i]-y[j]
			d[j], idx[j] = d0*d0+d1*d1, j
		}
		d[i] = math.Inf(1)
		votes := map[int32]int{}
		// Partial selection of the k nearest: k passes over the points.
		for range k {
			best := -1
			for j := range n {
				if idx[j] >= 0 && (best < 0 || d[j] < d[best]) {
					best = j
				}
			}
			votes[labels[best]]++
			idx[best] = -1
		}
		var top int32 = -1
		for l, c := range votes {
			if top < 0 || c > votes[top] || (c == votes[top] && l < top) {
				top = l
			}
		}
		if top == labels[i] {
			hits++
		}
	}
	return float64(hits) / float64(n), nil
}

// ClassSample draws up to a fixed number of vectors of each label from a stream of rows, a
// uniform sample of each class (reservoir sampling, Vitter's algorithm R) from its seed: the
// same rows in the same order give the same sample, so that embeddings of the same images by
// two encoders are sampled at the same rows.
type ClassSample struct {
	perClass int
	rng      *rand.Rand
	dim      int
	seen     map[int32]int64
	kept     map[int32][]sampledRow
}

type sampledRow struct {
	row int64 // position in the stream
	vec []float32
}

// NewClassSample keeps up to perClass rows of each label.
func NewClassSample(perClass int, seed uint64) *ClassSample {
	return &ClassSample{perClass: perClass, rng: rand.New(rand.NewPCG(seed, 0xc1a55)),
		seen: map[int32]int64{}, kept: map[int32][]sampledRow{}}
}

// Add offers the stream's next row (vec is copied when kept). Every vector must have the
// first one's length.
func (s *ClassSample) Add(row int64, label int32, vec []float32) error {
	if s.dim == 0 {
		s.dim = len(vec)
	}
	if len(vec) != s.dim || s.dim == 0 {
		return fmt.Errorf("row %d: vector of %d values, the first had %d", row, len(vec), s.dim)
	}
	seen := s.seen[label]
	s.seen[label] = seen + 1
	kept := s.kept[label]
	switch {
	case len(kept) < s.perClass:
		s.kept[label] = append(kept, sampledRow{row: row, vec: slices.Clone(vec)})
	default:
		if j := s.rng.Int64N(seen + 1); j < int64(s.perClass) {
			kept[j] = sampledRow{row: row, vec: slices.Clone(vec)}
		}
	}
	return nil
}

// Seen returns how many rows of each label were offered.
func (s *ClassSample) Seen() map[int32]int64 { return s.seen }

// Result returns the sample ordered by label, then by position in the stream.
func (s *ClassSample) Result(source string) LabeledVectors {
	out := LabeledVectors{Source: source, Vectors: Vectors{Dim: s.dim}}
	for _, l := range slices.Sorted(maps.Keys(s.kept)) {
		rows := slices.SortedFunc(slices.Values(s.kept[l]), func(a, b sampledRow) int { return cmp.Compare(a.row, b.row) })
		for _, r := range rows {
			out.Vectors.Data = append(out.Vectors.Data, r.vec...)
			out.Labels = append(out.Labels, l)
		}
	}
	return out
}
