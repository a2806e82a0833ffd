package pipelines

import (
	"context"
	"math"
	"path/filepath"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/passert"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"

	"github.com/dcl-beam/dcl-beam/analysis"
)

func init() {
	register.Function1x1(tallyTop1)
	register.Function1x1(batchSizeOf)
	register.Function1x1(statsBatchSize)
}

func tallyTop1(t analysis.Tally) int          { return int(t.Top1) }
func batchSizeOf(b npcBatch) int              { return b.Size }
func statsBatchSize(st analysis.NPCStats) int { return st.BatchSize }

// The kNN pipeline's steps pass typed elements (schema-coded structs): checked one step at a
// time with passert. Searching the bank in two groups and merging gives the tallies of one
// group, block by block; their top-1 counts add up to the plain loop's accuracy.
func TestKNNStepsUnderPassert(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	trainDir, testFile := filepath.Join(dir, "train"), filepath.Join(dir, "test.parquet")
	train, test := clustered(31, "train", 300, 8, 4), clustered(32, "test", 50, 8, 4)
	writeEmbeddings(t, trainDir, train, 3, nil)
	writeEmbeddings(t, testFile, test, 1, nil)
	want, err := analysis.KNN(train, test, analysis.KNNConfig{K: 20, Temperature: 0.1, NumClasses: 4})
	if err != nil {
		t.Fatal(err)
	}
	const queryBlock = 16 // 50 queries: 4 blocks
	tallies := func(s beam.Scope, groups int) beam.PCollection {
		job, err := PlanKNN(ctx, KNNOptions{Train: trainDir, Test: testFile, K: 20, Temperature: 0.1, NumClasses: 4, BankGroups: groups, QueryBlock: queryBlock})
		if err != nil {
			t.Fatal(err)
		}
		var offsets, rows [][]int64
		var paths [][]string
		for _, g := range job.Groups {
			var p []string
			var o, r []int64
			for _, f := range g {
				p, o, r = append(p, f.Path), append(o, f.Offset), append(r, f.Rows)
			}
			paths, offsets, rows = append(paths, p), append(offsets, o), append(rows, r)
		}
		tiles := beam.ParDo(s, &readQueriesFn{Test: testFile, QueryBlock: queryBlock, Groups: groups, NumClasses: 4}, beam.Impulse(s))
		passert.Count(s, tiles, "query tiles", 4*groups)
		partials := beam.ParDo(s, &searchTileFn{Groups: paths, Offsets: offsets, Rows: rows, K: 20, Metric: int(job.Opts.Metric),
			BankBlock: 64, NumClasses: 4}, tiles)
		passert.Count(s, partials, "partial neighbour lists", 4*groups)
		return beam.ParDo(s, &mergeVoteFn{K: 20, Temperature: 0.1, NumClasses: 4, Groups: groups, NTrain: 300}, beam.GroupByKey(s, partials))
	}
	p, s := beam.NewPipelineWithRoot()
	one, two := tallies(s.Scope("one"), 1), tallies(s.Scope("two"), 2)
	passert.Equals(s, two, one)
	passert.Sum(s, beam.ParDo(s, tallyTop1, two), "top-1 hits", 4, int(math.Round(want.Top1*50/100)))
	ptest.RunAndValidate(t, p)
}

// The NPC pipeline's steps pass typed elements too: every batch of every size is drawn, and
// each size gets one summary.
func TestNPCStepsUnderPassert(t *testing.T) {
	dir := t.TempDir()
	pairs := filepath.Join(dir, "pairs.parquet")
	writeEmbeddings(t, pairs, clustered(33, "pairs", 64, 8, 4), 1, nil)
	p, s := beam.NewPipelineWithRoot()
	batches := beam.ParDo(s, &drawBatchesFn{Embeddings: pairs, BatchSizes: []int{8, 16}, Seed: 1, Passes: 1}, beam.Impulse(s))
	// 64 pairs, each once: 8 batches of 8 and 4 of 16.
	passert.Equals(s, beam.ParDo(s, batchSizeOf, batches), 8, 8, 8, 8, 8, 8, 8, 8, 16, 16, 16, 16)
	qs := beam.ParDo(s, &multipliersFn{Temperature: 0.2}, batches)
	stats := beam.ParDo(s, &summariseFn{Bins: 10}, beam.GroupByKey(s, qs))
	passert.Equals(s, beam.ParDo(s, statsBatchSize, stats), 8, 16)
	ptest.RunAndValidate(t, p)
}
