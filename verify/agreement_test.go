package verify

import (
	"github.com/dcl-beam/dcl-beam/analysis"
	"math"
	"math/rand/v2"
	"testing"
)

func TestCompareVectors(t *testing.T) {
	a := analysis.Vectors{Dim: 2, Data: []float32{3, 4, 1, 0, 0, 0}}
	b := analysis.Vectors{Dim: 2, Data: []float32{3, 4, 1, 1, 0, 2}}
	d, err := CompareVectors(a, b)
	if err != nil {
		t.Fatal(err)
	}
	// Rows: 0/5, 1/√2, 2/2.
	if d.Rows != 3 || d.Max != 1 || d.MaxRow != 2 || math.Abs(d.Median-1/math.Sqrt2) > 1e-15 || math.Abs(d.RMS-math.Sqrt((0+0.5+1)/3.0)) > 1e-15 {
		t.Errorf("%+v", d)
	}
	if _, err := CompareVectors(a, analysis.Vectors{Dim: 3, Data: make([]float32, 6)}); err == nil {
		t.Error("vectors of other shapes compared")
	}
}

// perturb moves every row of v by a random vector of relative length at most tau (and, for
// half of the rows, exactly tau).
func perturb(r *rand.Rand, v analysis.Vectors, tau float64) analysis.Vectors {
	out := analysis.Vectors{Dim: v.Dim, Data: make([]float32, len(v.Data))}
	for i := range v.Len() {
		row, dir := v.Row(i), make([]float64, v.Dim)
		var norm, dn float64
		for j, x := range row {
			norm += float64(x) * float64(x)
			dir[j] = r.NormFloat64()
			dn += dir[j] * dir[j]
		}
		scale := tau * math.Sqrt(norm/dn) * 0.999
		if i%2 == 1 {
			scale *= r.Float64()
		}
		for j, x := range row {
			out.Data[i*v.Dim+j] = float32(float64(x) + scale*dir[j])
		}
	}
	return out
}

// TestUnstableCountsBoundTheChanges checks the bounds where they matter: perturbing every bank,
// query and test vector by up to tau of its length changes the kNN's and a linear probe's
// top-1 decisions of no more queries than KNNUnstable and LinearUnstable count for tau, while
// a perturbation of that size does change some (the counts are not vacuous), and tau 0
// leaves none unstable.
func TestUnstableCountsBoundTheChanges(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	bank := randomSet(r, "bank", 400, 16, 4, false)
	queries := randomSet(r, "queries", 200, 16, 4, false)
	cfg := analysis.KNNConfig{K: 20, Temperature: 0.1, NumClasses: 4}
	lcfg := analysis.DefaultLinearConfig().WithEpochs(5)
	lcfg.NumClasses, lcfg.BatchSize, lcfg.LR = 4, 32, 0.1
	probe, _, err := analysis.TrainLinear(bank, lcfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, tau := range []float64{0, 0.002, 0.02} {
		knnUnstable, err := KNNUnstable(bank, queries, cfg, tau)
		if err != nil {
			t.Fatal(err)
		}
		linUnstable, err := LinearUnstable(probe, queries.Vectors, tau)
		if err != nil {
			t.Fatal(err)
		}
		if tau == 0 && (knnUnstable != 0 || linUnstable != 0) {
			t.Errorf("tau 0: %d and %d unstable", knnUnstable, linUnstable)
		}
		base := knnPredictions(t, bank, queries, cfg.K, cfg.Temperature, analysis.Cosine, 4, 1000)
		baseScores, _ := probe.Scores(queries.Vectors)
		maxKNN, maxLin := 0, 0
		for trial := range 20 {
			pr := rand.New(rand.NewPCG(uint64(trial), 9))
			pb := analysis.LabeledVectors{Source: "bank'", Vectors: perturb(pr, bank.Vectors, tau), Labels: bank.Labels}
			pq := analysis.LabeledVectors{Source: "queries'", Vectors: perturb(pr, queries.Vectors, tau), Labels: queries.Labels}
			got := knnPredictions(t, pb, pq, cfg.K, cfg.Temperature, analysis.Cosine, 4, 1000)
			scores, _ := probe.Scores(pq.Vectors)
			changedKNN, changedLin := 0, 0
			for i := range base {
				if got[i][0] != base[i][0] {
					changedKNN++
				}
				if argmax(scores[4*i:4*i+4]) != argmax(baseScores[4*i:4*i+4]) {
					changedLin++
				}
			}
			maxKNN, maxLin = max(maxKNN, changedKNN), max(maxLin, changedLin)
		}
		t.Logf("tau %g: kNN %d unstable, at most %d changed; linear %d unstable, at most %d changed", tau, knnUnstable, maxKNN, linUnstable, maxLin)
		if maxKNN > knnUnstable || maxLin > linUnstable {
			t.Errorf("tau %g: %d kNN and %d linear decisions changed, more than the %d and %d counted unstable", tau, maxKNN, maxLin, knnUnstable, linUnstable)
		}
		if tau == 0.02 && (maxKNN == 0 || maxLin == 0) {
			t.Errorf("tau %g changed no decision: the test does not exercise the bounds", tau)
		}
	}
	if SimilarityShift(0.01) != 4*0.01/0.99 || SimilarityShift(1) != 2 {
		t.Error("SimilarityShift")
	}
}

func argmax(s []float32) int {
	best := 0
	for i, v := range s {
		if v > s[best] {
			best = i
		}
	}
	return best
}

// randomSet draws clustered vectors: each class has a random centre, so kNN has something to
// find. integer rounds values to small integers, making every dot product exact in float32
// (and ties between equal sums exact).
func randomSet(r *rand.Rand, source string, n, dim, numClasses int, integer bool) analysis.LabeledVectors {
	centres := make([][]float64, numClasses)
	for c := range centres {
		centres[c] = make([]float64, dim)
		for d := range dim {
			centres[c][d] = r.NormFloat64() * 2
		}
	}
	l := analysis.LabeledVectors{Source: source, Vectors: analysis.Vectors{Dim: dim, Data: make([]float32, n*dim)}, Labels: make([]int32, n)}
	for i := range n {
		c := r.IntN(numClasses)
		l.Labels[i] = int32(c)
		for d := range dim {
			v := centres[c][d] + r.NormFloat64()*2
			if integer {
				v = math.Round(v)
			}
			l.Vectors.Data[i*dim+d] = float32(v)
		}
	}
	return l
}

// knnPredictions runs the package's search and vote on every query: the pieces KNN is built
// from, so the tests see rankings and not only accuracies.
func knnPredictions(t *testing.T, train, test analysis.LabeledVectors, k int, temperature float64, metric analysis.Metric, numClasses, bankBlock int) [][]int {
	t.Helper()
	s, err := analysis.NewSearch(analysis.Prepare(test.Vectors, metric), k)
	if err != nil {
		t.Fatal(err)
	}
	bank := analysis.Prepare(train.Vectors, metric)
	for from := 0; from < bank.Len(); from += bankBlock {
		to := min(bank.Len(), from+bankBlock)
		if err := s.Add(bank.Slice(from, to), train.Labels[from:to], int64(from)); err != nil {
			t.Fatal(err)
		}
	}
	var preds [][]int
	for _, top := range s.Results() {
		scores, err := analysis.Vote(top, numClasses, temperature)
		if err != nil {
			t.Fatal(err)
		}
		preds = append(preds, analysis.RankClasses(scores, 5))
	}
	return preds
}
