package verify

import (
	"fmt"
	"math"
	"slices"

	"github.com/dcl-beam/dcl-beam/analysis"
)

// Agreement of two embeddings of the same images (two backends, or a backend and a more
// exact reference): how far apart the vectors are, and which kNN and linear-probe decisions
// a difference that large could change. The tolerance itself is the encoder's to derive
// (trainstep.ErrorModel); here it is an input, tau: the largest relative difference
// ‖a_i − b_i‖/‖b_i‖ of a row that the derivation allows.

// VectorDifference summarises the per-row relative differences ‖a_i − b_i‖/‖b_i‖.
type VectorDifference struct {
	Rows   int     `json:"rows"`
	Max    float64 `json:"max"`
	MaxRow int     `json:"max_row"`
	Median float64 `json:"median"`
	P99    float64 `json:"p99"`
	RMS    float64 `json:"rms"` // the root mean square over rows
}

// CompareVectors returns the per-row relative differences of a and b (same shape, rows in
// the same order); a zero row of b counts the absolute difference.
func CompareVectors(a, b analysis.Vectors) (VectorDifference, error) {
	if a.Dim != b.Dim || a.Len() != b.Len() {
		return VectorDifference{}, fmt.Errorf("%d vectors of %d values against %d of %d", a.Len(), a.Dim, b.Len(), b.Dim)
	}
	n := a.Len()
	if n == 0 {
		return VectorDifference{}, nil
	}
	rel := make([]float64, n)
	var sum float64
	for i := range n {
		var d2, b2 float64
		ra, rb := a.Row(i), b.Row(i)
		for j := range ra {
			d := float64(ra[j]) - float64(rb[j])
			d2 += d * d
			b2 += float64(rb[j]) * float64(rb[j])
		}
		rel[i] = math.Sqrt(d2)
		if b2 > 0 {
			rel[i] /= math.Sqrt(b2)
		}
		sum += rel[i] * rel[i]
	}
	out := VectorDifference{Rows: n, RMS: math.Sqrt(sum / float64(n))}
	for i, r := range rel {
		if r > out.Max || i == 0 {
			out.Max, out.MaxRow = r, i
		}
	}
	sorted := slices.Clone(rel)
	slices.Sort(sorted)
	out.Median = sorted[n/2]
	out.P99 = sorted[min(n-1, n*99/100)]
	return out, nil
}

// SimilarityShift is the most a cosine similarity can move when both of its vectors move by
// at most tau of their length: each unit vector moves by at most 2τ/(1−τ), and the inner
// product of two unit vectors by at most the sum of their moves.
func SimilarityShift(tau float64) float64 {
	if tau >= 1 {
		return 2 // any cosine similarity
	}
	return 4 * tau / (1 - tau)
}

// KNNUnstable counts the queries whose kNN top-1 class (the vote of cfg, cosine) could change
// if every bank and query vector moved by at most tau of its length, so that each similarity
// moves by at most δ = SimilarityShift(tau) and each vote weight exp(s/T) by a factor within
// exp(±δ/T). A neighbour is sure to stay among the k nearest when its similarity exceeds the
// (k+1)-th's by more than 2δ; one within 2δ of the k-th's may enter or leave. The best class
// keeps the vote when even its least vote (its sure neighbours' weights, shrunk) beats every
// other class's most (its sure neighbours' weights and as many of its uncertain ones as there
// are free places, grown). A change of the top-1 accuracy between two such embeddings is at
// most the unstable fraction.
func KNNUnstable(bank, queries analysis.LabeledVectors, cfg analysis.KNNConfig, tau float64) (int, error) {
	cfg = cfg.WithDefaults()
	if cfg.Metric != analysis.Cosine {
		return 0, fmt.Errorf("the stability of a kNN vote is derived for the cosine metric, not %s", cfg.Metric)
	}
	numClasses := cfg.NumClasses
	if numClasses == 0 {
		var err error
		if numClasses, err = analysis.NumClassesOf(bank, queries); err != nil {
			return 0, err
		}
	}
	k := cfg.K
	if k >= bank.Vectors.Len() {
		return 0, fmt.Errorf("k = %d needs a bank of more than k vectors (%s: %d)", k, bank.Source, bank.Vectors.Len())
	}
	delta := SimilarityShift(tau)
	grow, shrink := math.Exp(delta/cfg.Temperature), math.Exp(-delta/cfg.Temperature)
	seen := min(bank.Vectors.Len(), 2*k) // the neighbours looked at: the k nearest and as many after
	b := analysis.Prepare(bank.Vectors, analysis.Cosine)
	unstable := 0
	const block = 256
	lower, upper := make([]float64, numClasses), make([]float64, numClasses)
	uncertain := make([][]float64, numClasses)
	for from := 0; from < queries.Vectors.Len(); from += block {
		q := analysis.Prepare(queries.Vectors.Slice(from, min(queries.Vectors.Len(), from+block)), analysis.Cosine)
		tops, err := analysis.TopKBlock(q, b, bank.Labels, 0, seen)
		if err != nil {
			return 0, err
		}
		for _, top := range tops {
			votes, err := analysis.Vote(top[:k], numClasses, cfg.Temperature)
			if err != nil {
				return 0, err
			}
			winner := analysis.RankClasses(votes, 1)[0]
			kth, next := float64(top[k-1].Sim), float64(top[k].Sim)
			if len(top) == seen && seen < bank.Vectors.Len() && float64(top[seen-1].Sim) >= kth-2*delta {
				unstable++ // candidates beyond those looked at
				continue
			}
			best := float64(top[0].Sim)
			clear(lower)
			clear(upper)
			for c := range uncertain {
				uncertain[c] = uncertain[c][:0]
			}
			sure := 0
			for i, nb := range top {
				sim := float64(nb.Sim)
				w := math.Exp((sim - best) / cfg.Temperature)
				switch {
				case i < k && sim-next > 2*delta:
					sure++
					lower[nb.Label] += w * shrink
					upper[nb.Label] += w * grow
				case sim >= kth-2*delta:
					uncertain[nb.Label] = append(uncertain[nb.Label], w*grow)
				}
			}
			free := k - sure
			stable := true
			for c := range numClasses {
				if c == winner {
					continue
				}
				most := upper[c]
				for i, w := range uncertain[c] { // best first, as the neighbours are
					if i == free {
						break
					}
					most += w
				}
				if most >= lower[winner] {
					stable = false
					break
				}
			}
			if !stable {
				unstable++
			}
		}
	}
	return unstable, nil
}

// LinearUnstable counts the test vectors whose top-1 class under the linear model m could
// change if each vector moved by at most tau of its length: class c's score moves by at most
// ‖w_c‖·‖Δx‖ (after m's standardisation, which scales each feature by 1/std), so a decision
// holds when the best score exceeds the runner-up's by more than twice the largest such move.
func LinearUnstable(m *analysis.LinearModel, test analysis.Vectors, tau float64) (int, error) {
	scores, err := m.Scores(test)
	if err != nil {
		return 0, err
	}
	gain := 0.0 // the largest ‖w_c‖ with standardisation folded in
	for c := range m.NumClasses {
		var s float64
		for d, w := range m.W[c*m.Dim : (c+1)*m.Dim] {
			v := float64(w)
			if m.Std != nil {
				v /= float64(m.Std[d])
			}
			s += v * v
		}
		gain = max(gain, math.Sqrt(s))
	}
	unstable := 0
	for i := range test.Len() {
		var norm float64
		for _, v := range test.Row(i) {
			norm += float64(v) * float64(v)
		}
		move := gain * tau * math.Sqrt(norm)
		row := scores[i*m.NumClasses : (i+1)*m.NumClasses]
		best, second := math.Inf(-1), math.Inf(-1)
		for _, s := range row {
			switch v := float64(s); {
			case v > best:
				best, second = v, best
			case v > second:
				second = v
			}
		}
		if best-second <= 2*move {
			unstable++
		}
	}
	return unstable, nil
}
