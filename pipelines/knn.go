package pipelines

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"runtime"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"

	"github.com/dcl-beam/dcl-beam/analysis"
	"github.com/dcl-beam/dcl-beam/internal/progress"
	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/shards/embeddings"
)

// The kNN pipeline (KNN) classifies every test embedding by a weighted vote of its k nearest
// training embeddings:
//
//	Impulse ─ ReadQueries ─ KV<block, tile> ─ Reshuffle ─ SearchTiles ─ KV<block, partial>
//	                                                                          │
//	          GroupByKey ─ MergeAndVote ─ tallies ─(side input)─ Impulse ─ WriteResult
//
// ReadQueries streams the test set in blocks of QueryBlock queries and emits each block once
// per bank group: a group is a run of the training set's files. SearchTiles searches one
// block against one group, streaming the group's files in blocks of BankBlock rows (no worker
// holds more of the bank than that), and emits each query's k best neighbours in the group.
// MergeAndVote merges a block's partial lists with analysis.MergeTopK, which is exact, checks
// that every training row was searched exactly once for the block, votes and tallies.
// WriteResult adds the tallies up and writes the result JSON.

// Block sizes of the kNN pipeline when its options leave them at 0 (dcl knn's defaults too).
const (
	DefaultQueryBlock = 4096
	DefaultBankBlock  = 8192
)

// KNNOptions is what a kNN evaluation is asked to do: `dcl knn` fills it from its flags.
type KNNOptions struct {
	Train, Test string // embedding files (.parquet) or directories with embeddings.json
	// K, Temperature and Metric as in analysis.KNNConfig (defaults 200, 0.1, cosine).
	K           int
	Temperature float64
	Metric      analysis.Metric
	// NumClasses is the class count; 0 takes it from the embeddings' dataset (their
	// metadata), or else from the largest label.
	NumClasses int
	// QueryBlock is the number of test queries per work item (0: DefaultQueryBlock). Each work item
	// reads its bank group once and searches with every core of its worker: larger blocks
	// read the bank fewer times, smaller ones spread over more workers.
	QueryBlock int
	// BankGroups splits the training files into this many groups searched in parallel for
	// each query block and merged exactly (default 1: each work item streams the whole
	// training set). More groups mean more parallelism and more copies of each query block.
	BankGroups int
	// BankBlock is the number of training rows read and searched at once (0: DefaultBankBlock).
	BankBlock int
	// Output is where the pipeline writes the result JSON (local or gs://). Remote runners
	// need a path their workers and this program can both reach.
	Output string
	// PerClass keeps the per-class accuracies in the result.
	PerClass bool
}

// KNNJob is a planned kNN evaluation.
type KNNJob struct {
	Opts       KNNOptions
	NumClasses int
	NTrain     int64
	NTest      int64
	Dim        int
	Groups     [][]embeddingFile // the training files of each bank group
	// Classes names the training embeddings' classes (nil where they name none).
	Classes []string
	// Display shows the job's progress while it runs in this process (set it after
	// planning; see watch).
	Display  progress.Options
	progress *Progress
}

// PlanKNN checks the options against the embedding files (schemas, dimensions, sizes) and
// groups the training files. It reads only footers and manifests, unless the class count
// must be found from the labels.
func PlanKNN(ctx context.Context, o KNNOptions) (*KNNJob, error) {
	if o.Train == "" || o.Test == "" {
		return nil, errors.New("both the training and the test embeddings are needed")
	}
	d := analysis.DefaultKNNConfig()
	if o.K == 0 {
		o.K = d.K
	}
	if o.Temperature == 0 {
		o.Temperature = d.Temperature
	}
	if o.QueryBlock <= 0 {
		o.QueryBlock = DefaultQueryBlock
	}
	if o.BankGroups <= 0 {
		o.BankGroups = 1
	}
	if o.BankBlock <= 0 {
		o.BankBlock = DefaultBankBlock
	}
	switch {
	case o.K < 0:
		return nil, fmt.Errorf("k = %d: want at least 1", o.K)
	case !(o.Temperature > 0) || math.IsInf(o.Temperature, 0):
		return nil, fmt.Errorf("temperature %v: want a positive number", o.Temperature)
	case o.NumClasses < 0:
		return nil, fmt.Errorf("classes = %d: want at least 1, or 0 to find them", o.NumClasses)
	}
	train, err := inspectEmbeddings(ctx, o.Train)
	if err != nil {
		return nil, err
	}
	test, err := inspectEmbeddings(ctx, o.Test)
	if err != nil {
		return nil, err
	}
	switch {
	case train.Rows == 0:
		return nil, fmt.Errorf("%s: no training embeddings", o.Train)
	case test.Rows == 0:
		return nil, fmt.Errorf("%s: no test embeddings", o.Test)
	case train.Dim != test.Dim:
		return nil, fmt.Errorf("%s has %d-dimensional vectors, %s %d-dimensional", o.Train, train.Dim, o.Test, test.Dim)
	}
	numClasses, err := resolveNumClasses(ctx, o.NumClasses, train, test)
	if err != nil {
		return nil, err
	}
	if int64(o.K) > train.Rows {
		fit, notice := analysis.KNNConfig{K: o.K}.FitK(int(train.Rows), o.Train)
		slog.Warn(notice)
		o.K = fit.K
	}
	job := &KNNJob{Opts: o, NumClasses: numClasses, NTrain: train.Rows, NTest: test.Rows, Dim: train.Dim, Classes: train.Classes}
	job.Groups = groupFiles(train.Files, o.BankGroups)
	if len(job.Groups) < o.BankGroups {
		slog.Info("fewer bank groups than asked: a group holds whole files", "asked", o.BankGroups, "groups", len(job.Groups), "files", len(train.Files))
	}
	return job, nil
}

// groupFiles cuts files into at most n runs of about equal rows, each at least one file.
func groupFiles(files []embeddingFile, n int) [][]embeddingFile {
	var nonEmpty []embeddingFile
	var total int64
	for _, f := range files {
		if f.Rows > 0 {
			nonEmpty = append(nonEmpty, f)
			total += f.Rows
		}
	}
	n = max(1, min(n, len(nonEmpty)))
	var groups [][]embeddingFile
	var cur []embeddingFile
	var acc int64
	for i, f := range nonEmpty {
		cur = append(cur, f)
		acc += f.Rows
		left := len(nonEmpty) - i - 1
		// Close the group at its share of the rows, keeping one file for each group to come.
		if len(groups) < n-1 && (acc*int64(n) >= total*int64(len(groups)+1) || left == n-1-len(groups)) {
			groups = append(groups, cur)
			cur = nil
		}
	}
	if len(cur) > 0 {
		groups = append(groups, cur)
	}
	return groups
}

// The elements between the steps are Go structs that Beam encodes with schema row coders
// (inferred from their exported fields when the types are registered).
func init() {
	registerElement[queryTile]()
	registerElement[partialTopK]()
	registerElement[analysis.Tally]()
	register.DoFn3x1[context.Context, []byte, func(int, queryTile), error](&readQueriesFn{})
	register.DoFn4x1[context.Context, int, queryTile, func(int, partialTopK), error](&searchTileFn{})
	register.DoFn4x1[context.Context, int, func(*partialTopK) bool, func(analysis.Tally), error](&mergeVoteFn{})
	register.DoFn3x1[context.Context, []byte, func(*analysis.Tally) bool, error](&writeKNNResultFn{})
	register.Emitter2[int, queryTile]()
	register.Emitter2[int, partialTopK]()
	register.Emitter1[analysis.Tally]()
	register.Iter1[partialTopK]()
	register.Iter1[analysis.Tally]()
}

var (
	knnQueries    = beam.NewCounter(EvalMetricsNamespace, "knn_queries")
	knnBankRows   = beam.NewCounter(EvalMetricsNamespace, "knn_bank_rows_searched")
	knnTilesDone  = beam.NewCounter(EvalMetricsNamespace, "knn_tiles")
	knnBlocksDone = beam.NewCounter(EvalMetricsNamespace, "knn_blocks_voted")
)

// KNN adds the kNN pipeline of job to s. It writes job.Opts.Output and outputs nothing.
func KNN(s beam.Scope, job *KNNJob) {
	s = s.Scope("KNN")
	groups := make([][]string, len(job.Groups))
	offsets := make([][]int64, len(job.Groups))
	rows := make([][]int64, len(job.Groups))
	for g, files := range job.Groups {
		for _, f := range files {
			groups[g] = append(groups[g], f.Path)
			offsets[g] = append(offsets[g], f.Offset)
			rows[g] = append(rows[g], f.Rows)
		}
	}
	tiles := beam.ParDo(s.Scope("ReadQueries"), &readQueriesFn{
		Test: job.Opts.Test, QueryBlock: job.Opts.QueryBlock, Groups: len(job.Groups), NumClasses: job.NumClasses,
	}, beam.Impulse(s))
	partials := beam.ParDo(s.Scope("SearchTiles"), &searchTileFn{
		Groups: groups, Offsets: offsets, Rows: rows, K: job.Opts.K, Metric: int(job.Opts.Metric),
		BankBlock: job.Opts.BankBlock, NumClasses: job.NumClasses, ProgressID: job.progress.id(),
	}, beam.Reshuffle(s, tiles))
	tallies := beam.ParDo(s.Scope("MergeAndVote"), &mergeVoteFn{
		K: job.Opts.K, Temperature: job.Opts.Temperature, NumClasses: job.NumClasses,
		Groups: len(job.Groups), NTrain: job.NTrain,
	}, beam.GroupByKey(s, partials))
	beam.ParDo0(s.Scope("WriteResult"), &writeKNNResultFn{
		Output: job.Opts.Output, K: job.Opts.K, Temperature: job.Opts.Temperature, Metric: int(job.Opts.Metric),
		NumClasses: job.NumClasses, NTrain: job.NTrain, NTest: job.NTest, PerClass: job.Opts.PerClass, Classes: job.Classes,
	}, beam.Impulse(s), beam.SideInput{Input: tallies})
}

// queryTile is one work item of SearchTiles: a block of test queries and the bank group to
// search them against.
type queryTile struct {
	Block  int
	Group  int
	Offset int64 // test-set index of the block's first query
	Labels []int32
	Dim    int
	Data   []float32
}

// validate checks a tile's sizes agree.
func (t *queryTile) validate() error {
	if t.Dim <= 0 || len(t.Data) != len(t.Labels)*t.Dim {
		return fmt.Errorf("query block %d: %d values for %d queries of dimension %d", t.Block, len(t.Data), len(t.Labels), t.Dim)
	}
	return nil
}

// partialTopK is what SearchTiles emits: each query's best neighbours in one bank group. The
// lists are stored flat, a column per field (Counts[q] neighbours of query q, one after the
// other): Beam's row coder encodes a slice of numbers several times faster than a slice of
// structs, and the lists are most of what the kNN pipeline moves.
type partialTopK struct {
	Group  int
	Offset int64
	Labels []int32 // the queries' true labels
	Seen   int64   // bank rows searched
	Counts []int32
	Index  []int64
	Label  []int32
	Sim    []float32
}

func newPartialTopK(group int, offset int64, labels []int32, seen int64, tops []analysis.TopK) partialTopK {
	p := partialTopK{Group: group, Offset: offset, Labels: labels, Seen: seen, Counts: make([]int32, len(tops))}
	n := 0
	for _, t := range tops {
		n += len(t)
	}
	p.Index, p.Label, p.Sim = make([]int64, 0, n), make([]int32, 0, n), make([]float32, 0, n)
	for q, t := range tops {
		p.Counts[q] = int32(len(t))
		for _, nb := range t {
			p.Index, p.Label, p.Sim = append(p.Index, nb.Index), append(p.Label, nb.Label), append(p.Sim, nb.Sim)
		}
	}
	return p
}

// tops returns the neighbour lists, one per query, checking that the columns agree.
func (p *partialTopK) tops() ([]analysis.TopK, error) {
	if len(p.Counts) != len(p.Labels) || len(p.Label) != len(p.Index) || len(p.Sim) != len(p.Index) {
		return nil, fmt.Errorf("%d neighbour lists for %d queries, %d indices, %d labels and %d similarities",
			len(p.Counts), len(p.Labels), len(p.Index), len(p.Label), len(p.Sim))
	}
	tops := make([]analysis.TopK, len(p.Counts))
	at := 0
	for q, c := range p.Counts {
		if c < 0 || at+int(c) > len(p.Index) {
			return nil, fmt.Errorf("neighbour list %d of %d runs past the %d neighbours", q, len(p.Counts), len(p.Index))
		}
		t := make(analysis.TopK, c)
		for i := range t {
			t[i] = analysis.Neighbor{Index: p.Index[at+i], Label: p.Label[at+i], Sim: p.Sim[at+i]}
		}
		tops[q], at = t, at+int(c)
	}
	if at != len(p.Index) {
		return nil, fmt.Errorf("%d neighbours for lists of %d", len(p.Index), at)
	}
	return tops, nil
}

// readQueriesFn streams the test embeddings and emits every block of queries once per bank
// group, keyed by block.
type readQueriesFn struct {
	Test       string
	QueryBlock int
	Groups     int
	NumClasses int
}

func (f *readQueriesFn) ProcessElement(ctx context.Context, _ []byte, emit func(int, queryTile)) error {
	r, err := embeddings.Open(ctx, f.Test, f.QueryBlock)
	if err != nil {
		return err
	}
	defer r.Close()
	var offset int64
	for block := 0; ; block++ {
		b, err := r.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := checkLabels(f.Test, offset, b.Labels, f.NumClasses); err != nil {
			return err
		}
		vecs := analysis.Vectors{Dim: b.Dim, Data: b.Vectors}
		if err := vecs.Validate(fmt.Sprintf("%s (rows %d to %d)", f.Test, offset, offset+int64(b.Len())-1)); err != nil {
			return err
		}
		for g := range f.Groups {
			emit(block, queryTile{Block: block, Group: g, Offset: offset, Labels: b.Labels, Dim: b.Dim, Data: b.Vectors})
		}
		knnQueries.Inc(ctx, int64(b.Len()))
		offset += int64(b.Len())
	}
}

// searchTileFn searches one block of queries against one bank group, streamed.
type searchTileFn struct {
	Groups     [][]string // files of each group
	Offsets    [][]int64  // training-set index of each file's first row
	Rows       [][]int64  // rows of each file, as planned
	K          int
	Metric     int
	BankBlock  int
	NumClasses int
	ProgressID string

	progress *Progress
}

func (f *searchTileFn) Setup() { f.progress = lookupProgress(f.ProgressID) }

func (f *searchTileFn) ProcessElement(ctx context.Context, block int, t queryTile, emit func(int, partialTopK)) error {
	if err := t.validate(); err != nil {
		return err
	}
	if t.Group < 0 || t.Group >= len(f.Groups) {
		return fmt.Errorf("query block %d names bank group %d of %d", block, t.Group, len(f.Groups))
	}
	metric := analysis.Metric(f.Metric)
	// The block's queries are split between the worker's cores; the bank is read once.
	search, err := analysis.NewParallelSearch(analysis.Prepare(analysis.Vectors{Dim: t.Dim, Data: t.Data}, metric), f.K, runtime.GOMAXPROCS(0))
	if err != nil {
		return err
	}
	for i, path := range f.Groups[t.Group] {
		if err := searchFile(ctx, search, path, f.Offsets[t.Group][i], f.Rows[t.Group][i], t.Dim, f.BankBlock, f.NumClasses, metric); err != nil {
			return err
		}
	}
	knnBankRows.Inc(ctx, search.Seen())
	knnTilesDone.Inc(ctx, 1)
	f.progress.addDone(int64(len(t.Labels)))
	emit(block, newPartialTopK(t.Group, t.Offset, t.Labels, search.Seen(), search.Results()))
	return nil
}

// searchFile streams one training file past the search.
func searchFile(ctx context.Context, s *analysis.ParallelSearch, path string, offset, rows int64, dim, blockRows, numClasses int, metric analysis.Metric) error {
	r, err := embeddings.Open(ctx, path, blockRows)
	if err != nil {
		return err
	}
	defer r.Close()
	if r.Rows() != rows {
		return fmt.Errorf("%s has %d rows, %d when the job was planned: it changed", path, r.Rows(), rows)
	}
	var row int64
	for {
		b, err := r.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if b.Dim != dim {
			return fmt.Errorf("%s: rows %d to %d have %d values, the queries %d", path, row, row+int64(b.Len())-1, b.Dim, dim)
		}
		if err := checkLabels(path, row, b.Labels, numClasses); err != nil {
			return err
		}
		vecs := analysis.Vectors{Dim: b.Dim, Data: b.Vectors}
		if err := vecs.Validate(fmt.Sprintf("%s (rows %d to %d)", path, row, row+int64(b.Len())-1)); err != nil {
			return err
		}
		if err := s.Add(analysis.Prepare(vecs, metric), b.Labels, offset+row); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		row += int64(b.Len())
	}
}

// mergeVoteFn merges the partial neighbour lists of one query block, votes and tallies.
type mergeVoteFn struct {
	K           int
	Temperature float64
	NumClasses  int
	Groups      int
	NTrain      int64
}

func (f *mergeVoteFn) ProcessElement(ctx context.Context, block int, partials func(*partialTopK) bool, emit func(analysis.Tally)) error {
	var merged *partialTopK
	var top []analysis.TopK
	seenGroups := map[int]bool{}
	for {
		p := new(partialTopK)
		if !partials(p) {
			break
		}
		if seenGroups[p.Group] {
			continue // a retried bundle's duplicate: the same group's answer again
		}
		seenGroups[p.Group] = true
		lists, err := p.tops()
		if err != nil {
			return fmt.Errorf("query block %d, bank group %d: %w", block, p.Group, err)
		}
		if merged == nil {
			merged, top = p, lists
			continue
		}
		if p.Offset != merged.Offset || len(lists) != len(top) {
			return fmt.Errorf("query block %d: partial results for different queries", block)
		}
		for q := range top {
			top[q] = analysis.MergeTopK(top[q], lists[q], f.K)
		}
		merged.Seen += p.Seen
	}
	if merged == nil || len(seenGroups) != f.Groups {
		return fmt.Errorf("query block %d: %d of %d bank groups answered", block, len(seenGroups), f.Groups)
	}
	if merged.Seen != f.NTrain {
		return fmt.Errorf("query block %d was searched against %d training rows, the training set has %d", block, merged.Seen, f.NTrain)
	}
	t := analysis.NewTally(f.NumClasses)
	for q, top := range top {
		scores, err := analysis.Vote(top, f.NumClasses, f.Temperature)
		if err != nil {
			return err
		}
		if err := t.Add(merged.Labels[q], analysis.RankClasses(scores, 5)); err != nil {
			return fmt.Errorf("query %d: %w", merged.Offset+int64(q), err)
		}
	}
	knnBlocksDone.Inc(ctx, 1)
	emit(*t)
	return nil
}

// writeKNNResultFn adds up the blocks' tallies and writes the result.
type writeKNNResultFn struct {
	Output      string
	K           int
	Temperature float64
	Metric      int
	NumClasses  int
	NTrain      int64
	NTest       int64
	PerClass    bool
	// Classes names the training embeddings' classes, for the per-class accuracies.
	Classes []string
}

func (f *writeKNNResultFn) ProcessElement(ctx context.Context, _ []byte, tallies func(*analysis.Tally) bool) error {
	total := analysis.NewTally(f.NumClasses)
	for {
		t := new(analysis.Tally)
		if !tallies(t) {
			break
		}
		if err := total.Merge(t); err != nil {
			return err
		}
	}
	if total.N != f.NTest {
		return fmt.Errorf("%d of the %d test embeddings were classified", total.N, f.NTest)
	}
	acc := total.Accuracy()
	res := analysis.KNNResult{
		Top1: acc.Top1, Top5: acc.Top5, K: f.K, Temperature: f.Temperature, Metric: analysis.Metric(f.Metric),
		NTrain: int(f.NTrain), NTest: int(f.NTest), NumClasses: f.NumClasses,
	}
	if f.PerClass {
		res.PerClass = acc.PerClass
		analysis.NameClasses(res.PerClass, f.Classes)
	}
	return storage.SaveJSON(ctx, f.Output, res)
}

// RunKNN builds the kNN pipeline and runs it on the runner the Beam flags select (prism in
// process by default), then reads back the result. Without an Output it writes the result
// to a temporary local file, which only a runner in this process or on this machine can
// reach.
func RunKNN(ctx context.Context, job *KNNJob) (*analysis.KNNResult, error) {
	var res analysis.KNNResult
	// Each query is searched once per bank group.
	var end func(bool)
	job.progress, end = watch(job.Display, "knn", job.NTest*int64(len(job.Groups)), "query searches", "")
	ok, err := runForResult(ctx, "knn", &job.Opts.Output, func(s beam.Scope) { KNN(s, job) }, &res)
	end(err == nil)
	if !ok {
		return nil, err
	}
	return &res, nil
}
