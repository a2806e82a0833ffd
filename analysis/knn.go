package analysis

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"

	"github.com/dcl-beam/dcl-beam/gpu/kernels"
)

// Neighbor is one training example found near a query.
type Neighbor struct {
	Index int64   // position in the whole training set
	Label int32   // its class
	Sim   float32 // its similarity to the query under the search's metric
}

// better reports whether a ranks before b: higher similarity first, and among equal
// similarities the lower training index, so results never depend on scan or merge order.
func better(a, b Neighbor) bool {
	return a.Sim > b.Sim || (a.Sim == b.Sim && a.Index < b.Index)
}

// TopK is a query's nearest neighbours, best first (see better).
type TopK []Neighbor

// MergeTopK merges two partial results for the same query, each sorted best first and taken
// over disjoint parts of the training set, into the k best of both: the exact top k of the
// union. A neighbour present in both (the same index) is kept once.
func MergeTopK(a, b TopK, k int) TopK {
	out := make(TopK, 0, min(k, len(a)+len(b)))
	i, j := 0, 0
	for len(out) < k && (i < len(a) || j < len(b)) {
		switch {
		case j == len(b) || (i < len(a) && better(a[i], b[j])):
			out = append(out, a[i])
			i++
		case i < len(a) && a[i].Index == b[j].Index:
			out = append(out, a[i]) // the same example seen twice: keep one
			i++
			j++
		default:
			out = append(out, b[j])
			j++
		}
	}
	return out
}

// simChunkFloats bounds a search's similarity buffer (16 MiB of float32), so memory does not
// grow with the bank block a caller hands in; large enough that the matrix multiply's packing
// of the queries is spread over thousands of bank vectors.
const simChunkFloats = 1 << 22

// Search finds the k nearest training examples of a fixed block of queries while the training
// set (the bank) is streamed past it in blocks of any size and in any order. Its matrix
// multiplies run on the calling goroutine: parallelism comes from searching different query
// blocks at once. A Search is not safe for concurrent use.
type Search struct {
	queries Prepared
	k       int
	cands   []candidates // one per query
	sims    []float32
	seen    int64
	pool    *kernels.Pool
}

// candidates holds one query's best neighbours so far, unordered: at most 2k of them, of
// which the best k are kept whenever the buffer fills. Compared with a heap, a neighbour that
// beats the current k-th best costs O(1) amortised instead of O(log k).
type candidates struct {
	buf  []Neighbor
	kth  Neighbor // the k-th best neighbour kept at the last compaction
	full bool     // kth is set: anything not better than it can be skipped
}

// NewSearch starts a search for the k nearest neighbours of queries.
func NewSearch(queries Prepared, k int) (*Search, error) {
	if k <= 0 {
		return nil, fmt.Errorf("k = %d: want at least 1", k)
	}
	s := &Search{queries: queries, k: k, cands: make([]candidates, queries.Len()), pool: serialPool()}
	for i := range s.cands {
		s.cands[i].buf = make([]Neighbor, 0, 2*k)
	}
	return s, nil
}

// Add scans one block of the bank: bank vectors prepared for the same metric as the queries,
// their labels, and the training-set index of the block's first vector.
func (s *Search) Add(bank Prepared, labels []int32, offset int64) error {
	nq, nb := s.queries.Len(), bank.Len()
	switch {
	case bank.Metric != s.queries.Metric:
		return fmt.Errorf("bank prepared for %v, queries for %v", bank.Metric, s.queries.Metric)
	case nb > 0 && bank.Vectors.Dim != s.queries.Vectors.Dim:
		return fmt.Errorf("bank vectors have dimension %d, queries %d", bank.Vectors.Dim, s.queries.Vectors.Dim)
	case len(labels) != nb:
		return fmt.Errorf("bank block has %d vectors and %d labels", nb, len(labels))
	case offset < 0:
		return fmt.Errorf("bank offset %d is negative", offset)
	}
	if nq == 0 || nb == 0 {
		s.seen += int64(nb)
		return nil
	}
	chunk := max(1, min(nb, simChunkFloats/nq))
	if len(s.sims) < nq*chunk {
		s.sims = make([]float32, nq*chunk)
	}
	dim := s.queries.Vectors.Dim
	for from := 0; from < nb; from += chunk {
		to := min(nb, from+chunk)
		w := to - from
		sims := s.sims[:nq*w]
		block := bank.Slice(from, to)
		alpha := float32(1)
		if bank.Metric == Euclidean {
			alpha = 2
		}
		sgemm(s.pool, false, true, nq, w, dim, alpha, s.queries.Vectors.Data, dim, block.Vectors.Data, dim, 0, sims, w)
		if bank.Metric == Euclidean {
			// -|q-b|² = 2q·b - |q|² - |b|², clamped at 0 where rounding overshoots.
			for i := range nq {
				row := sims[i*w : (i+1)*w]
				qq := s.queries.SqNorms[i]
				for j := range row {
					row[j] = min(0, row[j]-qq-block.SqNorms[j])
				}
			}
		}
		for i := range nq {
			s.cands[i].offer(s.k, sims[i*w:(i+1)*w], labels[from:to], offset+int64(from))
		}
	}
	s.seen += int64(nb)
	return nil
}

// Seen returns how many bank vectors the search has scanned.
func (s *Search) Seen() int64 { return s.seen }

// Results returns each query's neighbours, best first. The search can go on afterwards.
func (s *Search) Results() []TopK {
	out := make([]TopK, len(s.cands))
	for i := range s.cands {
		out[i] = s.cands[i].best(s.k)
	}
	return out
}

// offer considers one row of similarities, bank vectors offset, offset+1, ….
func (c *candidates) offer(k int, sims []float32, labels []int32, offset int64) {
	for j, sim := range sims {
		if c.full && sim <= c.kth.Sim {
			// Not better than the k-th best: skip, unless it ties and has the lower index.
			if sim < c.kth.Sim || offset+int64(j) > c.kth.Index {
				continue
			}
		}
		c.buf = append(c.buf, Neighbor{Index: offset + int64(j), Label: labels[j], Sim: sim})
		if len(c.buf) == 2*k {
			c.compact(k)
		}
	}
}

// compact keeps the k best candidates.
func (c *candidates) compact(k int) {
	selectBest(c.buf, k)
	c.buf = c.buf[:k]
	c.kth, c.full = c.buf[k-1], true
}

// best returns the k best candidates, best first, leaving c usable.
func (c *candidates) best(k int) TopK {
	if len(c.buf) > k {
		c.compact(k)
	}
	t := slices.Clone(TopK(c.buf))
	slices.SortFunc(t, func(a, b Neighbor) int {
		if better(a, b) {
			return -1
		}
		if better(b, a) {
			return 1
		}
		return 0
	})
	return t
}

// selectBest reorders a so that a[:k] are its k best neighbours and a[k-1] the k-th best
// (Hoare's quickselect with a median-of-three pivot; 1 <= k <= len(a)).
func selectBest(a []Neighbor, k int) {
	target := k - 1
	lo, hi := 0, len(a)-1
	for lo < hi {
		mid := lo + (hi-lo)/2
		if better(a[mid], a[lo]) {
			a[mid], a[lo] = a[lo], a[mid]
		}
		if better(a[hi], a[lo]) {
			a[hi], a[lo] = a[lo], a[hi]
		}
		if better(a[hi], a[mid]) {
			a[hi], a[mid] = a[mid], a[hi]
		}
		pivot := a[mid]
		i, j := lo, hi
		for i <= j {
			for better(a[i], pivot) {
				i++
			}
			for better(pivot, a[j]) {
				j--
			}
			if i <= j {
				a[i], a[j] = a[j], a[i]
				i++
				j--
			}
		}
		switch {
		case target <= j:
			hi = j
		case target >= i:
			lo = i
		default:
			return
		}
	}
}

// ParallelSearch is a Search whose queries are split between goroutines: each bank block
// handed to Add is searched by all of them at once. It is how one work item of a pipeline
// uses every core of its worker.
type ParallelSearch struct {
	parts []*Search
}

// NewParallelSearch starts a search for the k nearest neighbours of queries on up to workers
// goroutines (at least 64 queries each).
func NewParallelSearch(queries Prepared, k, workers int) (*ParallelSearch, error) {
	n := queries.Len()
	workers = max(1, min(workers, n/64))
	p := &ParallelSearch{}
	for w := range workers {
		s, err := NewSearch(queries.Slice(w*n/workers, (w+1)*n/workers), k)
		if err != nil {
			return nil, err
		}
		p.parts = append(p.parts, s)
	}
	return p, nil
}

// Add scans one block of the bank (see Search.Add).
func (p *ParallelSearch) Add(bank Prepared, labels []int32, offset int64) error {
	errs := make([]error, len(p.parts))
	var wg sync.WaitGroup
	for i, s := range p.parts {
		wg.Go(func() { errs[i] = s.Add(bank, labels, offset) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Seen returns how many bank vectors the search has scanned.
func (p *ParallelSearch) Seen() int64 { return p.parts[0].Seen() }

// Results returns each query's neighbours, best first, in the queries' order.
func (p *ParallelSearch) Results() []TopK {
	var out []TopK
	for _, s := range p.parts {
		out = append(out, s.Results()...)
	}
	return out
}

// TopKBlock returns, for each query, its k nearest vectors in one bank block whose first
// vector is training example bankOffset. Partial results over disjoint blocks combine
// exactly with MergeTopK.
func TopKBlock(queries, bank Prepared, bankLabels []int32, bankOffset int64, k int) ([]TopK, error) {
	s, err := NewSearch(queries, k)
	if err != nil {
		return nil, err
	}
	if err := s.Add(bank, bankLabels, bankOffset); err != nil {
		return nil, err
	}
	return s.Results(), nil
}

// Vote returns each class's score for one query: the sum over its neighbours of
// exp(sim/temperature) for the neighbour's class. Weights are computed relative to the best
// neighbour, exp((sim-best)/T), which scales every class by the same factor: the ranking is
// that of exp(sim/T), and no metric's similarities can overflow it. A class with no
// neighbours scores 0.
func Vote(top TopK, numClasses int, temperature float64) ([]float64, error) {
	if !(temperature > 0) || math.IsInf(temperature, 0) {
		return nil, fmt.Errorf("temperature %v: want a positive number", temperature)
	}
	scores := make([]float64, numClasses)
	if len(top) == 0 {
		return scores, nil
	}
	best := float64(top[0].Sim)
	for _, nb := range top {
		if nb.Label < 0 || int(nb.Label) >= numClasses {
			return nil, fmt.Errorf("neighbour %d has label %d outside [0, %d)", nb.Index, nb.Label, numClasses)
		}
		scores[nb.Label] += math.Exp((float64(nb.Sim) - best) / temperature)
	}
	return scores, nil
}

// RankClasses returns the n best classes by score, best first; equal scores rank the lower
// class id first. n is capped at the number of classes.
func RankClasses(scores []float64, n int) []int {
	n = min(n, len(scores))
	out := make([]int, 0, n)
	for c, s := range scores {
		// Insert c after every ranked class with a score >= s (lower ids come first on ties).
		pos := len(out)
		for pos > 0 && scores[out[pos-1]] < s {
			pos--
		}
		if pos >= n {
			continue
		}
		if len(out) < n {
			out = append(out, 0)
		}
		copy(out[pos+1:], out[pos:len(out)-1])
		out[pos] = c
	}
	return out
}

// Tally counts top-1 and top-5 hits, overall and per class. Tallies of disjoint query sets
// merge exactly (integer counts), so workers can count separately.
type Tally struct {
	N, Top1, Top5 int64
	ClassN        []int64 // queries per true class
	ClassTop1     []int64
	ClassTop5     []int64
}

// NewTally returns an empty tally over numClasses classes.
func NewTally(numClasses int) *Tally {
	return &Tally{ClassN: make([]int64, numClasses), ClassTop1: make([]int64, numClasses), ClassTop5: make([]int64, numClasses)}
}

// Add counts one query with true class label and the classes ranked best first.
func (t *Tally) Add(label int32, ranking []int) error {
	if label < 0 || int(label) >= len(t.ClassN) {
		return fmt.Errorf("label %d outside [0, %d)", label, len(t.ClassN))
	}
	t.N++
	t.ClassN[label]++
	for r, c := range ranking[:min(5, len(ranking))] {
		if c != int(label) {
			continue
		}
		if r == 0 {
			t.Top1++
			t.ClassTop1[label]++
		}
		t.Top5++
		t.ClassTop5[label]++
		break
	}
	return nil
}

// Merge adds o's counts to t.
func (t *Tally) Merge(o *Tally) error {
	if len(o.ClassN) != len(t.ClassN) {
		return fmt.Errorf("merging tallies over %d and %d classes", len(t.ClassN), len(o.ClassN))
	}
	t.N += o.N
	t.Top1 += o.Top1
	t.Top5 += o.Top5
	for c := range t.ClassN {
		t.ClassN[c] += o.ClassN[c]
		t.ClassTop1[c] += o.ClassTop1[c]
		t.ClassTop5[c] += o.ClassTop5[c]
	}
	return nil
}

// Accuracy is top-1 and top-5 accuracy in percent.
type Accuracy struct {
	Top1     float64         `json:"top1"`
	Top5     float64         `json:"top5"`
	PerClass []ClassAccuracy `json:"per_class,omitempty"`
}

// ClassAccuracy is the accuracy on the test examples of one class. A class without test
// examples has N = 0 and accuracies of 0.
type ClassAccuracy struct {
	Class int `json:"class"`
	// Name is the class's name, where the embeddings name their classes.
	Name string  `json:"name,omitempty"`
	N    int64   `json:"n"`
	Top1 float64 `json:"top1"`
	Top5 float64 `json:"top5"`
}

// Accuracy returns the tallied accuracies in percent.
func (t *Tally) Accuracy() Accuracy {
	a := Accuracy{Top1: percent(t.Top1, t.N), Top5: percent(t.Top5, t.N)}
	for c, n := range t.ClassN {
		a.PerClass = append(a.PerClass, ClassAccuracy{Class: c, N: n, Top1: percent(t.ClassTop1[c], n), Top5: percent(t.ClassTop5[c], n)})
	}
	return a
}

func percent(hits, n int64) float64 {
	if n == 0 {
		return 0
	}
	return 100 * float64(hits) / float64(n)
}

// LabeledVectors is a set of embeddings with their classes, and the name of the file they
// came from for error messages.
type LabeledVectors struct {
	Source  string
	Vectors Vectors
	Labels  []int32
	// Classes names the labels' classes (label i is Classes[i]); nil where the source
	// names none.
	Classes []string
}

// NameClasses gives each class accuracy its class's name, where classes names it.
func NameClasses(per []ClassAccuracy, classes []string) {
	for i := range per {
		if c := per[i].Class; c >= 0 && c < len(classes) {
			per[i].Name = classes[c]
		}
	}
}

// Validate checks the vectors (whole, finite) and that every label is in [0, numClasses);
// errors name the source and row.
func (l LabeledVectors) Validate(numClasses int) error {
	if err := l.Vectors.Validate(l.Source); err != nil {
		return err
	}
	if n := l.Vectors.Len(); n != len(l.Labels) {
		return fmt.Errorf("%s: %d vectors but %d labels", l.Source, n, len(l.Labels))
	}
	for i, y := range l.Labels {
		if y < 0 || int(y) >= numClasses {
			return fmt.Errorf("%s: row %d: label %d outside [0, %d) for a dataset of %d classes", l.Source, i, y, numClasses, numClasses)
		}
	}
	return nil
}

// NumClassesOf returns one more than the largest label in any of sets: the class count when
// the dataset does not say. Negative labels are an error naming the source.
func NumClassesOf(sets ...LabeledVectors) (int, error) {
	n := 0
	for _, s := range sets {
		for i, y := range s.Labels {
			if y < 0 {
				return 0, fmt.Errorf("%s: row %d: negative label %d (unlabelled examples cannot be evaluated)", s.Source, i, y)
			}
			n = max(n, int(y)+1)
		}
	}
	if n == 0 {
		return 0, errors.New("no labels")
	}
	return n, nil
}

// KNNConfig configures the weighted kNN classifier. The zero value of a field means its
// default (DefaultKNNConfig).
type KNNConfig struct {
	K           int     // neighbours per query; default 200
	Temperature float64 // vote weight exp(sim/T); default 0.1
	Metric      Metric  // default Cosine
	// NumClasses is the dataset's class count; labels outside [0, NumClasses) are an error.
	// 0 means one more than the largest label seen.
	NumClasses int
	QueryBlock int // queries searched together; default 1024 (fewer if a worker would get none)
	BankBlock  int // training vectors per block streamed past them; default 16384
	Workers    int // goroutines, each on its own query blocks; default GOMAXPROCS
}

// FitK returns c with k at most n, the vectors of the bank that can vote, and where it lowers
// k a notice that says so: the kNN evaluation and the trainer's monitor both let every vector
// of a bank smaller than k vote, and say so, rather than one refusing what the other does.
func (c KNNConfig) FitK(n int, bank string) (KNNConfig, string) {
	if c.K <= n {
		return c, ""
	}
	notice := fmt.Sprintf("k = %d is larger than the bank (%s: %d vectors): all %d vote, k = %d", c.K, bank, n, n, n)
	c.K = n
	return c, notice
}

// DefaultKNNConfig is the weighted kNN of MoCo's CIFAR monitor: cosine similarity, k = 200
// (InstDisc's), T = 0.1 (MoCo's; InstDisc voted with T = 0.07).
func DefaultKNNConfig() KNNConfig {
	return KNNConfig{K: 200, Temperature: 0.1, Metric: Cosine, QueryBlock: 1024, BankBlock: 16384}
}

// WithDefaults fills the fields left zero with DefaultKNNConfig's, and Workers with GOMAXPROCS.
func (c KNNConfig) WithDefaults() KNNConfig {
	d := DefaultKNNConfig()
	if c.K == 0 {
		c.K = d.K
	}
	if c.Temperature == 0 {
		c.Temperature = d.Temperature
	}
	if c.QueryBlock <= 0 {
		c.QueryBlock = d.QueryBlock
	}
	if c.BankBlock <= 0 {
		c.BankBlock = d.BankBlock
	}
	if c.Workers <= 0 {
		c.Workers = runtime.GOMAXPROCS(0)
	}
	return c
}

// KNNResult is the outcome of a kNN evaluation, as `dcl knn` prints it.
type KNNResult struct {
	Top1        float64         `json:"top1"`
	Top5        float64         `json:"top5"`
	K           int             `json:"k"`
	Temperature float64         `json:"temperature"`
	Metric      Metric          `json:"metric"`
	NTrain      int             `json:"n_train"`
	NTest       int             `json:"n_test"`
	NumClasses  int             `json:"num_classes"`
	PerClass    []ClassAccuracy `json:"per_class,omitempty"`
}

// KNN classifies every test vector by a weighted vote of its k nearest training vectors and
// returns top-1 and top-5 accuracy, overall and per class. Test vectors are split into
// blocks that workers search in parallel, each streaming the training set past its block, so
// the result is the same for any block sizes and worker count.
func KNN(train, test LabeledVectors, cfg KNNConfig) (*KNNResult, error) {
	cfg = cfg.WithDefaults()
	numClasses := cfg.NumClasses
	if numClasses == 0 {
		var err error
		if numClasses, err = NumClassesOf(train, test); err != nil {
			return nil, fmt.Errorf("%s, %s: %w", train.Source, test.Source, err)
		}
	}
	if err := train.Validate(numClasses); err != nil {
		return nil, err
	}
	if err := test.Validate(numClasses); err != nil {
		return nil, err
	}
	nTrain, nTest := train.Vectors.Len(), test.Vectors.Len()
	switch {
	case cfg.K < 0:
		return nil, fmt.Errorf("k = %d: want at least 1", cfg.K)
	case cfg.K > nTrain:
		return nil, fmt.Errorf("k = %d is larger than the training set (%s: %d vectors)", cfg.K, train.Source, nTrain)
	case !(cfg.Temperature > 0) || math.IsInf(cfg.Temperature, 0):
		return nil, fmt.Errorf("temperature %v: want a positive number", cfg.Temperature)
	case nTest > 0 && train.Vectors.Dim != test.Vectors.Dim:
		return nil, fmt.Errorf("%s has %d-dimensional vectors, %s %d-dimensional", train.Source, train.Vectors.Dim, test.Source, test.Vectors.Dim)
	}
	bank := Prepare(train.Vectors, cfg.Metric)

	// Large query blocks spread the matrix multiply's packing of each bank block over many
	// queries, but every worker should get one.
	cfg.QueryBlock = max(1, min(cfg.QueryBlock, (nTest+cfg.Workers-1)/cfg.Workers))
	nBlocks := (nTest + cfg.QueryBlock - 1) / cfg.QueryBlock
	tallies := make([]*Tally, nBlocks)
	errs := make([]error, nBlocks)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(cfg.Workers, max(nBlocks, 1)) {
		wg.Go(func() {
			for b := range next {
				from, to := b*cfg.QueryBlock, min(nTest, (b+1)*cfg.QueryBlock)
				tallies[b], errs[b] = knnBlock(bank, train.Labels, test.Vectors.Slice(from, to), test.Labels[from:to], numClasses, cfg)
			}
		})
	}
	for b := range nBlocks {
		next <- b
	}
	close(next)
	wg.Wait()

	total := NewTally(numClasses)
	for b, t := range tallies {
		if errs[b] != nil {
			return nil, errs[b]
		}
		if err := total.Merge(t); err != nil {
			return nil, err
		}
	}
	acc := total.Accuracy()
	NameClasses(acc.PerClass, train.Classes)
	return &KNNResult{
		Top1: acc.Top1, Top5: acc.Top5, K: cfg.K, Temperature: cfg.Temperature, Metric: cfg.Metric,
		NTrain: nTrain, NTest: nTest, NumClasses: numClasses, PerClass: acc.PerClass,
	}, nil
}

// knnBlock searches one block of queries against the whole bank, streamed in blocks, and
// tallies the votes.
func knnBlock(bank Prepared, bankLabels []int32, queries Vectors, labels []int32, numClasses int, cfg KNNConfig) (*Tally, error) {
	s, err := NewSearch(Prepare(queries, cfg.Metric), cfg.K)
	if err != nil {
		return nil, err
	}
	for from := 0; from < bank.Len(); from += cfg.BankBlock {
		to := min(bank.Len(), from+cfg.BankBlock)
		if err := s.Add(bank.Slice(from, to), bankLabels[from:to], int64(from)); err != nil {
			return nil, err
		}
	}
	t := NewTally(numClasses)
	for i, top := range s.Results() {
		scores, err := Vote(top, numClasses, cfg.Temperature)
		if err != nil {
			return nil, err
		}
		if err := t.Add(labels[i], RankClasses(scores, 5)); err != nil {
			return nil, err
		}
	}
	return t, nil
}
