package analysis

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// refKNN is the straightforward reference: every similarity in float64, a full sort, the
// first k, votes exp(sim/T) and a full sort of the classes. It returns each query's five best
// classes.
func refKNN(train, test LabeledVectors, k int, temperature float64, metric Metric, numClasses int) [][]int {
	norm := func(x []float32) []float64 {
		out := make([]float64, len(x))
		var s float64
		for i, v := range x {
			out[i] = float64(v)
			s += out[i] * out[i]
		}
		if metric == Cosine && s > 0 {
			for i := range out {
				out[i] /= math.Sqrt(s)
			}
		}
		return out
	}
	bank := make([][]float64, train.Vectors.Len())
	for i := range bank {
		bank[i] = norm(train.Vectors.Row(i))
	}
	var preds [][]int
	for qi := range test.Vectors.Len() {
		q := norm(test.Vectors.Row(qi))
		type cand struct {
			idx int
			sim float64
		}
		var cands []cand
		for bi, b := range bank {
			var sim float64
			for d := range q {
				if metric == Euclidean {
					sim -= (q[d] - b[d]) * (q[d] - b[d])
				} else {
					sim += q[d] * b[d]
				}
			}
			cands = append(cands, cand{bi, sim})
		}
		slices.SortFunc(cands, func(a, b cand) int {
			if c := cmp.Compare(b.sim, a.sim); c != 0 {
				return c
			}
			return cmp.Compare(a.idx, b.idx)
		})
		scores := make([]float64, numClasses)
		for _, c := range cands[:k] {
			scores[train.Labels[c.idx]] += math.Exp(c.sim / temperature)
		}
		classes := make([]int, numClasses)
		for c := range classes {
			classes[c] = c
		}
		slices.SortFunc(classes, func(a, b int) int {
			if c := cmp.Compare(scores[b], scores[a]); c != 0 {
				return c
			}
			return cmp.Compare(a, b)
		})
		preds = append(preds, classes[:min(5, numClasses)])
	}
	return preds
}

func accuracyOf(preds [][]int, labels []int32) (top1, top5 float64) {
	var h1, h5 int
	for i, p := range preds {
		if p[0] == int(labels[i]) {
			h1++
		}
		if slices.Contains(p, int(labels[i])) {
			h5++
		}
	}
	return 100 * float64(h1) / float64(len(preds)), 100 * float64(h5) / float64(len(preds))
}

// randomSet draws clustered vectors: each class has a random centre, so kNN has something to
// find. integer rounds values to small integers, making every dot product exact in float32
// (and ties between equal sums exact).
func randomSet(r *rand.Rand, source string, n, dim, numClasses int, integer bool) LabeledVectors {
	centres := make([][]float64, numClasses)
	for c := range centres {
		centres[c] = make([]float64, dim)
		for d := range dim {
			centres[c][d] = r.NormFloat64() * 2
		}
	}
	l := LabeledVectors{Source: source, Vectors: Vectors{Dim: dim, Data: make([]float32, n*dim)}, Labels: make([]int32, n)}
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
func knnPredictions(t *testing.T, train, test LabeledVectors, k int, temperature float64, metric Metric, numClasses, bankBlock int) [][]int {
	t.Helper()
	s, err := NewSearch(Prepare(test.Vectors, metric), k)
	if err != nil {
		t.Fatal(err)
	}
	bank := Prepare(train.Vectors, metric)
	for from := 0; from < bank.Len(); from += bankBlock {
		to := min(bank.Len(), from+bankBlock)
		if err := s.Add(bank.Slice(from, to), train.Labels[from:to], int64(from)); err != nil {
			t.Fatal(err)
		}
	}
	var preds [][]int
	for _, top := range s.Results() {
		scores, err := Vote(top, numClasses, temperature)
		if err != nil {
			t.Fatal(err)
		}
		preds = append(preds, RankClasses(scores, 5))
	}
	return preds
}

func TestKNNMatchesReference(t *testing.T) {
	tests := []struct {
		name       string
		metric     Metric
		integer    bool
		k          int
		temp       float64
		numClasses int
	}{
		{"cosine k=200 T=0.1", Cosine, false, 200, 0.1, 7},
		{"cosine k=1", Cosine, false, 1, 0.1, 7},
		{"cosine 3 classes (top-5 covers all)", Cosine, false, 20, 0.07, 3},
		{"dot integer", Dot, true, 15, 50, 6},
		{"euclidean integer", Euclidean, true, 15, 50, 6},
		{"euclidean float", Euclidean, false, 30, 5, 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, 2))
			train := randomSet(r, "train.parquet", 600, 12, tt.numClasses, tt.integer)
			test := randomSet(r, "test.parquet", 120, 12, tt.numClasses, tt.integer)
			want := refKNN(train, test, tt.k, tt.temp, tt.metric, tt.numClasses)
			for _, bankBlock := range []int{1, 37, 600} {
				got := knnPredictions(t, train, test, tt.k, tt.temp, tt.metric, tt.numClasses, bankBlock)
				for i := range want {
					if !slices.Equal(got[i], want[i]) {
						t.Errorf("bank block %d: query %d ranks %v, reference %v", bankBlock, i, got[i], want[i])
					}
				}
			}
			want1, want5 := accuracyOf(want, test.Labels)
			for _, cfg := range []KNNConfig{
				{QueryBlock: 1, BankBlock: 7, Workers: 1},
				{QueryBlock: 13, BankBlock: 100, Workers: 3},
				{},
			} {
				cfg.K, cfg.Temperature, cfg.Metric, cfg.NumClasses = tt.k, tt.temp, tt.metric, tt.numClasses
				res, err := KNN(train, test, cfg)
				if err != nil {
					t.Fatal(err)
				}
				if res.Top1 != want1 || res.Top5 != want5 {
					t.Errorf("%+v: top1 %.2f top5 %.2f, reference %.2f %.2f", cfg, res.Top1, res.Top5, want1, want5)
				}
				if res.NTrain != 600 || res.NTest != 120 || res.K != tt.k {
					t.Errorf("result counts %+v", res)
				}
			}
		})
	}
}

func TestKNNSimilarityTiesPreferLowerIndex(t *testing.T) {
	// Four identical training vectors with classes 3, 1, 2, 0 and one farther vector; k = 2
	// cuts the tie: the two lowest indices (classes 3 and 1) must be the neighbours.
	train := LabeledVectors{Source: "train", Vectors: Vectors{Dim: 2, Data: []float32{
		1, 0, 1, 0, 1, 0, 1, 0, 0, 1,
	}}, Labels: []int32{3, 1, 2, 0, 2}}
	query := Prepare(Vectors{Dim: 2, Data: []float32{2, 0}}, Cosine)
	bank := Prepare(train.Vectors, Cosine)
	for _, order := range [][]int{{0, 5}, {3, 5, 0, 3}, {4, 5, 2, 4, 0, 2}} {
		// Search the bank in blocks given out of order: the answer must not change.
		s, err := NewSearch(query, 2)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < len(order); i += 2 {
			from, to := order[i], order[i+1]
			if err := s.Add(bank.Slice(from, to), train.Labels[from:to], int64(from)); err != nil {
				t.Fatal(err)
			}
		}
		got := s.Results()[0]
		want := TopK{{Index: 0, Label: 3, Sim: 1}, {Index: 1, Label: 1, Sim: 1}}
		if !slices.Equal(got, want) {
			t.Errorf("blocks %v: neighbours %v, want %v", order, got, want)
		}
		scores, err := Vote(got, 4, 0.1)
		if err != nil {
			t.Fatal(err)
		}
		// Classes 1 and 3 tie in the vote: the lower class id wins.
		if rank := RankClasses(scores, 4); !slices.Equal(rank, []int{1, 3, 0, 2}) {
			t.Errorf("ranking %v, want [1 3 0 2]", rank)
		}
	}
}

func TestRankClasses(t *testing.T) {
	tests := []struct {
		give []float64
		n    int
		want []int
	}{
		{[]float64{0.1, 0.5, 0.5, 0.2}, 5, []int{1, 2, 3, 0}},
		{[]float64{0.1, 0.5, 0.5, 0.2}, 1, []int{1}},
		{[]float64{0, 0, 0}, 2, []int{0, 1}},
		{[]float64{0, 0, 3, 0, 0, 0, 1}, 5, []int{2, 6, 0, 1, 3}},
		{[]float64{}, 5, []int{}},
	}
	for _, tt := range tests {
		if got := RankClasses(tt.give, tt.n); !slices.Equal(got, tt.want) {
			t.Errorf("RankClasses(%v, %d) = %v, want %v", tt.give, tt.n, got, tt.want)
		}
	}
}

func TestMergeTopKIsExact(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	// Integer vectors in few distinct values: many exact similarity ties across blocks.
	train := randomSet(r, "train", 500, 4, 5, true)
	for i := range train.Vectors.Data {
		train.Vectors.Data[i] = float32(int(train.Vectors.Data[i]) % 3)
	}
	test := randomSet(r, "test", 40, 4, 5, true)
	queries, bank := Prepare(test.Vectors, Dot), Prepare(train.Vectors, Dot)
	for _, k := range []int{1, 10, 200} {
		want, err := TopKBlock(queries, bank, train.Labels, 0, k)
		if err != nil {
			t.Fatal(err)
		}
		// Cut the bank at random points and merge the blocks' results in a random order.
		cuts := []int{0, 500}
		for range 6 {
			cuts = append(cuts, r.IntN(501))
		}
		slices.Sort(cuts)
		merged := make([]TopK, queries.Len())
		streamed, err := NewSearch(queries, k) // one search fed the same blocks out of order
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range r.Perm(len(cuts) - 1) {
			from, to := cuts[b], cuts[b+1]
			if err := streamed.Add(bank.Slice(from, to), train.Labels[from:to], int64(from)); err != nil {
				t.Fatal(err)
			}
			part, err := TopKBlock(queries, bank.Slice(from, to), train.Labels[from:to], int64(from), k)
			if err != nil {
				t.Fatal(err)
			}
			for q := range merged {
				merged[q] = MergeTopK(merged[q], part[q], k)
			}
		}
		got := streamed.Results()
		for q := range want {
			if !slices.Equal(merged[q], want[q]) {
				t.Fatalf("k=%d cuts %v query %d: merged %v, want %v", k, cuts, q, merged[q], want[q])
			}
			if !slices.Equal(got[q], want[q]) {
				t.Fatalf("k=%d cuts %v query %d: streamed out of order %v, want %v", k, cuts, q, got[q], want[q])
			}
		}
		// Merging a result with itself changes nothing.
		if got := MergeTopK(want[0], want[0], k); !slices.Equal(got, want[0]) {
			t.Errorf("k=%d: self-merge %v, want %v", k, got, want[0])
		}
	}
}

func TestKNNEmptyClassNeverWins(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	train := randomSet(r, "train", 300, 8, 4, false)
	for i, y := range train.Labels {
		if y == 2 {
			train.Labels[i] = 1 // class 2 has no training examples
		}
	}
	test := randomSet(r, "test", 100, 8, 4, false)
	res, err := KNN(train, test, KNNConfig{K: 300, NumClasses: 6})
	if err != nil {
		t.Fatal(err)
	}
	for _, pc := range res.PerClass {
		switch pc.Class {
		case 2:
			if pc.N == 0 || pc.Top1 != 0 {
				t.Errorf("class 2 (no training examples, %d test examples) has top-1 %.1f%%, want 0", pc.N, pc.Top1)
			}
		case 4, 5:
			if pc.N != 0 || pc.Top1 != 0 {
				t.Errorf("class %d without any examples: %+v", pc.Class, pc)
			}
		}
	}
	want := refKNN(train, test, 300, 0.1, Cosine, 6)
	want1, want5 := accuracyOf(want, test.Labels)
	if res.Top1 != want1 || res.Top5 != want5 {
		t.Errorf("top1 %.2f top5 %.2f, reference %.2f %.2f", res.Top1, res.Top5, want1, want5)
	}
}

func TestKNNZeroVectors(t *testing.T) {
	// A zero vector has cosine 0 with everything: a zero query sees every training vector at
	// similarity 0 and takes the lowest indices; a zero training vector sits at 0 for all.
	train := LabeledVectors{Source: "train", Vectors: Vectors{Dim: 2, Data: []float32{
		0, 0, 1, 0, -1, 0, 0, 1,
	}}, Labels: []int32{0, 1, 2, 3}}
	tests := []struct {
		query []float32
		want  TopK
	}{
		{[]float32{0, 0}, TopK{{0, 0, 0}, {1, 1, 0}, {2, 2, 0}}},
		{[]float32{3, 0}, TopK{{1, 1, 1}, {0, 0, 0}, {3, 3, 0}}},
		{[]float32{-2, 0}, TopK{{2, 2, 1}, {0, 0, 0}, {3, 3, 0}}},
	}
	for _, tt := range tests {
		got, err := TopKBlock(Prepare(Vectors{Dim: 2, Data: tt.query}, Cosine), Prepare(train.Vectors, Cosine), train.Labels, 0, 3)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got[0], tt.want) {
			t.Errorf("query %v: %v, want %v", tt.query, got[0], tt.want)
		}
	}
}

func TestKNNErrors(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	train := randomSet(r, "gs://b/emb/train.parquet", 50, 4, 3, false)
	test := randomSet(r, "out/test.parquet", 20, 4, 3, false)
	badLabel := test
	badLabel.Labels = slices.Clone(test.Labels)
	badLabel.Labels[7] = 10
	negLabel := test
	negLabel.Labels = slices.Clone(test.Labels)
	negLabel.Labels[3] = -1
	otherDim := randomSet(r, "out/test.parquet", 20, 5, 3, false)
	nan := test
	nan.Vectors.Data = slices.Clone(test.Vectors.Data)
	nan.Vectors.Data[9] = float32(math.NaN())
	tests := []struct {
		name        string
		train, test LabeledVectors
		cfg         KNNConfig
		want        []string
	}{
		{"k larger than training set", train, test, KNNConfig{K: 51}, []string{"k = 51", "larger than the training set", "gs://b/emb/train.parquet", "50 vectors"}},
		{"label out of range for known dataset", train, badLabel, KNNConfig{NumClasses: 10}, []string{"out/test.parquet", "row 7", "label 10", "[0, 10)"}},
		{"negative label", train, negLabel, KNNConfig{}, []string{"out/test.parquet", "row 3", "negative label -1"}},
		{"dimensions differ", train, otherDim, KNNConfig{K: 5}, []string{"gs://b/emb/train.parquet", "4-dimensional", "out/test.parquet", "5-dimensional"}},
		{"non-finite value", train, nan, KNNConfig{K: 5}, []string{"out/test.parquet", "row 2", "non-finite"}},
		{"bad temperature", train, test, KNNConfig{K: 5, Temperature: -1}, []string{"temperature -1"}},
		{"labels missing", train, LabeledVectors{Source: "t.parquet", Vectors: test.Vectors, Labels: test.Labels[:5]}, KNNConfig{K: 5, NumClasses: 3}, []string{"t.parquet", "20 vectors but 5 labels"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := KNN(tt.train, tt.test, tt.cfg)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestVectorsFromRows(t *testing.T) {
	tests := []struct {
		give    [][]float32
		wantErr string
	}{
		{[][]float32{{1, 2}, {3, 4}}, ""},
		{[][]float32{{1, 2}, {3, 4}, {5}}, "emb.parquet: row 2: vector has 1 values, row 0 has 2 (mixed lengths)"},
		{[][]float32{{}}, "emb.parquet: row 0: empty vector"},
		{[][]float32{{1, 2}, {float32(math.Inf(1)), 4}}, "emb.parquet: row 1: non-finite value +Inf at position 0"},
		{nil, ""},
	}
	for _, tt := range tests {
		v, err := VectorsFromRows(tt.give, "emb.parquet")
		if tt.wantErr == "" {
			if err != nil || v.Len() != len(tt.give) {
				t.Errorf("VectorsFromRows(%v) = %v, %v", tt.give, v, err)
			}
			continue
		}
		if err == nil || err.Error() != tt.wantErr {
			t.Errorf("VectorsFromRows(%v) error %v, want %q", tt.give, err, tt.wantErr)
		}
	}
}

func TestSearchRejectsMismatchedBlocks(t *testing.T) {
	q := Prepare(Vectors{Dim: 2, Data: []float32{1, 0}}, Cosine)
	s, err := NewSearch(q, 1)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		bank   Prepared
		labels []int32
		want   string
	}{
		{Prepare(Vectors{Dim: 2, Data: []float32{1, 0}}, Dot), []int32{0}, "bank prepared for dot, queries for cosine"},
		{Prepare(Vectors{Dim: 3, Data: []float32{1, 0, 0}}, Cosine), []int32{0}, "dimension 3, queries 2"},
		{Prepare(Vectors{Dim: 2, Data: []float32{1, 0}}, Cosine), nil, "1 vectors and 0 labels"},
	}
	for _, tt := range tests {
		if err := s.Add(tt.bank, tt.labels, 0); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Add: %v, want %q", err, tt.want)
		}
	}
	if _, err := NewSearch(q, 0); err == nil {
		t.Error("NewSearch with k = 0: no error")
	}
}

func TestTallyMergeAddsUp(t *testing.T) {
	a, b, all := NewTally(3), NewTally(3), NewTally(3)
	adds := []struct {
		label int32
		rank  []int
	}{{0, []int{0, 1, 2}}, {1, []int{0, 1, 2}}, {2, []int{0, 1, 2}}, {1, []int{1, 0, 2}}, {2, []int{2}}}
	for i, add := range adds {
		part := a
		if i%2 == 1 {
			part = b
		}
		for _, tl := range []*Tally{part, all} {
			if err := tl.Add(add.label, add.rank); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := a.Merge(b); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(a) != fmt.Sprint(all) {
		t.Errorf("merged %v, want %v", a, all)
	}
	acc := all.Accuracy()
	if acc.Top1 != 60 || acc.Top5 != 100 || acc.PerClass[1].Top1 != 50 {
		t.Errorf("accuracy %+v", acc)
	}
	if err := a.Add(3, nil); err == nil {
		t.Error("label 3 of 3 classes accepted")
	}
	if err := a.Merge(NewTally(2)); err == nil {
		t.Error("merging tallies of different class counts accepted")
	}
}

func TestParseMetric(t *testing.T) {
	for _, m := range []Metric{Cosine, Dot, Euclidean} {
		got, err := ParseMetric(m.String())
		if err != nil || got != m {
			t.Errorf("ParseMetric(%q) = %v, %v", m, got, err)
		}
	}
	if _, err := ParseMetric("manhattan"); err == nil || !strings.Contains(err.Error(), "cosine, dot, euclidean") {
		t.Errorf("ParseMetric(manhattan): %v", err)
	}
}

func TestSelectBest(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	byRank := func(a, b Neighbor) int {
		if better(a, b) {
			return -1
		}
		if better(b, a) {
			return 1
		}
		return 0
	}
	for trial := range 2000 {
		n := 1 + r.IntN(70)
		k := 1 + r.IntN(n)
		a := make([]Neighbor, n)
		for i, idx := range r.Perm(n) {
			a[i] = Neighbor{Index: int64(idx), Sim: float32(r.IntN(1 + trial%5))} // many ties
		}
		want := slices.Clone(a)
		slices.SortFunc(want, byRank)
		selectBest(a, k)
		if a[k-1] != want[k-1] {
			t.Fatalf("n=%d k=%d: a[k-1] = %v, want the k-th best %v", n, k, a[k-1], want[k-1])
		}
		got := slices.Clone(a[:k])
		slices.SortFunc(got, byRank)
		if !slices.Equal(got, want[:k]) {
			t.Fatalf("n=%d k=%d: best %v, want %v", n, k, got, want[:k])
		}
	}
}

func TestParallelSearchMatchesSearch(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	train := randomSet(r, "train", 700, 6, 4, true)
	test := randomSet(r, "test", 300, 6, 4, true)
	queries, bank := Prepare(test.Vectors, Dot), Prepare(train.Vectors, Dot)
	want, err := TopKBlock(queries, bank, train.Labels, 0, 25)
	if err != nil {
		t.Fatal(err)
	}
	for _, workers := range []int{1, 2, 5, 100} {
		p, err := NewParallelSearch(queries, 25, workers)
		if err != nil {
			t.Fatal(err)
		}
		for from := 0; from < 700; from += 128 {
			to := min(700, from+128)
			if err := p.Add(bank.Slice(from, to), train.Labels[from:to], int64(from)); err != nil {
				t.Fatal(err)
			}
		}
		got := p.Results()
		if p.Seen() != 700 || len(got) != 300 {
			t.Fatalf("%d workers: seen %d, %d results", workers, p.Seen(), len(got))
		}
		for q := range want {
			if !slices.Equal(got[q], want[q]) {
				t.Fatalf("%d workers, query %d: %v, want %v", workers, q, got[q], want[q])
			}
		}
	}
}
