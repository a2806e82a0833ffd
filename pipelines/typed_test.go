package pipelines

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/passert"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"

	"github.com/dcl-beam/dcl-beam/analysis"
	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/internal/testing/testfiles"
	"github.com/dcl-beam/dcl-beam/shards"
	"github.com/dcl-beam/dcl-beam/shards/embeddings"
	"github.com/dcl-beam/dcl-beam/transforms/datasets"
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

func init() {
	register.Function3x0(refLines)
	register.Function1x1(statsLine)
	register.Function2x1(configBatchLine)
	register.Function2x0(twice)
	register.Emitter1[string]()
}

// refLine is one record reference of a shard, as the preprocess tests compare them.
func refLine(shard int, r ref) string {
	return fmt.Sprintf("shard %d unit %d index %d order %d crc %08x ref %q", shard, r.Unit, r.Index, r.Order, r.CRC, r.Ref)
}

func refLines(shard int, b refBatch, emit func(string)) {
	refs, err := b.appendRefs(nil)
	if err != nil {
		emit(err.Error())
	}
	for _, r := range refs {
		emit(refLine(shard, r))
	}
}

func statsLine(s unitStats) string {
	return fmt.Sprintf("unit %d: %d records, %d bad, digest of %d characters", s.Seq, s.Records, s.Bad, len(s.Digest))
}

// configBatchLine is PrepareOutput's batch for a shard: no references and the footer's
// configuration (checksummed, without the sources).
func configBatchLine(shard int, b refBatch) string {
	if b.Config == nil {
		return fmt.Sprintf("shard %d: %d references, no configuration", shard, b.len())
	}
	return fmt.Sprintf("shard %d: %d references, checksum %q, %d sources", shard, b.len(), b.Config.SourceChecksum, len(b.Config.Sources))
}

// twice emits every element twice: a retried step reporting its output again.
func twice(info embeddings.FileInfo, emit func(embeddings.FileInfo)) { emit(info); emit(info) }

// The preprocess pipeline's steps pass typed elements, checked one step at a time with
// passert on an image folder with a file that is not an image (a dead letter of ReadUnits)
// and a cut JPEG (a dead letter of WriteParts). Every reference of every record and pass
// arrives once, as the records read directly place them; the configuration, the shard
// entries and the dead letters are those of the composed pipeline (Preprocess), and the
// steps wired by hand write the same bytes.
func TestPreprocessStepsUnderPassert(t *testing.T) {
	ctx := context.Background()
	in, notImage, truncated := badFolder(t)
	o := folderOptions(t, in)
	o.MaxBadFraction = 0.5
	composedOut := o.Output
	composed := mustPreprocess(t, o).Manifest
	composedLetters, err := shards.ReadDeadLetters(ctx, composedOut, composed)
	if err != nil {
		t.Fatal(err)
	}
	o.Output = filepath.Join(t.TempDir(), "out")
	job, err := PlanPreprocess(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	cfg := job.Config

	var tasks []unitTask
	var wantRefs, wantStats []string
	var readDead, writeDead []shards.DeadLetter
	for i, u := range job.Plan.Units {
		tasks = append(tasks, unitTask{Seq: i, Unit: u})
		st, err := datasets.Read(ctx, u, func(r datasets.Record) error {
			part, order := shards.Place(cfg.Seed, r.Key, cfg.Parts)
			for pass := range cfg.Passes {
				wantRefs = append(wantRefs, refLine(pass*cfg.Parts+part, ref{Order: order, Unit: int32(i), Index: r.Index, CRC: recordCRC(&r), Ref: r.Ref}))
			}
			return nil
		}, func(b datasets.BadRecord) error {
			readDead = append(readDead, deadLetterOf(b))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		wantStats = append(wantStats, statsLine(unitStats{Seq: i, Records: st.Records, Bad: st.Bad, Digest: strings.Repeat("0", 64)}))
	}
	for _, l := range composedLetters {
		if l.Source == truncated {
			writeDead = append(writeDead, l)
		}
	}
	if len(wantRefs) != 2*11 || len(readDead) != 1 || readDead[0].Source != notImage || len(writeDead) != 1 {
		t.Fatalf("the fixture: %d references, dead letters %+v and %+v; want 22, the file that is not an image and the cut JPEG", len(wantRefs), readDead, writeDead)
	}
	var wantBatches []string
	for shard := range cfg.Passes * cfg.Parts {
		wantBatches = append(wantBatches, fmt.Sprintf("shard %d: 0 references, checksum %q, 0 sources", shard, composed.Config.SourceChecksum))
	}

	p, s := beam.NewPipelineWithRoot()
	units := beam.GroupByKey(s, beam.ParDo(s, keyByUnit, beam.CreateList(s, tasks)))
	refs, dead, stats := beam.ParDo3(s, &readUnitsFn{Seed: cfg.Seed, Passes: cfg.Passes, Parts: cfg.Parts}, units)
	passert.Equals(s, beam.ParDo(s, refLines, refs), toAny(wantRefs)...)
	passert.Equals(s, dead, toAny(readDead)...)
	passert.Equals(s, beam.ParDo(s, statsLine, stats), toAny(wantStats)...)

	toShards, config := beam.ParDo2(s, &prepareOutputFn{Output: o.Output, Config: cfg, Units: len(tasks),
		UnitSources: unitSources(job.Plan.Units, cfg.Sources)}, beam.Impulse(s), beam.SideInput{Input: stats})
	passert.Equals(s, beam.ParDo(s, configBatchLine, toShards), toAny(wantBatches)...)
	wantCfg := composed.Config
	wantCfg.Augment = cfg.Augment // the manifest indents it
	passert.Equals(s, config, wantCfg)

	infos, partDead := beam.ParDo2(s, &writePartFn{Output: o.Output, Units: fetchUnits(job.Plan.Units)},
		beam.GroupByKey(s, beam.Flatten(s, refs, toShards)))
	passert.Equals(s, infos, toAny(composed.Shards)...)
	passert.Equals(s, partDead, toAny(writeDead)...)

	beam.ParDo0(s, &commitFn{Output: o.Output, MaxBadFraction: o.MaxBadFraction}, beam.Impulse(s), beam.SideInput{Input: config},
		beam.SideInput{Input: infos}, beam.SideInput{Input: beam.Flatten(s, dead, partDead)}, beam.SideInput{Input: stats})
	ptest.RunAndValidate(t, p)
	m, err := shards.ReadManifest(ctx, o.Output)
	if err != nil {
		t.Fatal(err)
	}
	if m.Records != 12 || m.Rows != 2*10 || m.DeadLetters.Count != 2 {
		t.Errorf("manifest: %d records, %d rows, %d dead letters; want 12, 20, 2", m.Records, m.Rows, m.DeadLetters.Count)
	}
	sameFiles(t, testfiles.TreeChecksums(t, o.Output), testfiles.TreeChecksums(t, composedOut))
}

func toAny[T any](xs []T) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = x
	}
	return out
}

// The embed pipeline's steps pass typed elements: every range gives one file, whose entry
// is the one the composed pipeline (Embed) commits; Commit takes a range reported twice (a
// retry) once, and refuses a missing one.
func TestEmbedStepsUnderPassert(t *testing.T) {
	ctx := context.Background()
	data := t.TempDir()
	writePairShards(t, data, 37, 8, 2, 2, 3)
	run := trainTinyEncoder(t, data)
	plan := func(out string) *EmbedJob {
		job, err := PlanEmbed(ctx, EmbedOptions{Checkpoint: run, Data: data, Output: out, Views: 2, Pass: -1, BatchSize: 8, Parts: 3})
		if err != nil {
			t.Fatal(err)
		}
		return job
	}
	composedOut := filepath.Join(t.TempDir(), "emb")
	if _, err := RunEmbed(ctx, plan(composedOut)); err != nil {
		t.Fatal(err)
	}
	var composed embeddings.Manifest
	if err := storage.LoadJSON(ctx, storage.Join(composedOut, embeddings.ManifestName), &composed); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "emb")
	job := plan(out)
	defer job.Close()
	if len(job.Ranges) != 4 || len(composed.Files) != 4 {
		t.Fatalf("%d ranges and %d files; want 4 (74 rows of 2 passes in parts of 24)", len(job.Ranges), len(composed.Files))
	}
	o := job.Opts
	p, s := beam.NewPipelineWithRoot()
	infos := beam.ParDo(s, &embedRangeFn{Checkpoint: o.Checkpoint, Data: o.Data, PartsDir: partsDir(o.Output), Feature: string(o.Feature),
		Views: o.Views, BatchSize: o.BatchSize, Dim: job.Dim, Meta: job.Meta, Backend: string(o.Backend), TF32: job.tf32,
	}, beam.CreateList(s, job.Ranges))
	passert.Equals(s, infos, toAny(composed.Files)...)
	commit := &commitEmbeddingsFn{Output: o.Output, Dim: job.Dim, Meta: job.Meta, Parts: len(job.Ranges), Rows: job.Rows}
	manifest := beam.ParDo(s, commit, beam.Impulse(s), beam.SideInput{Input: beam.ParDo(s, twice, infos)})
	passert.Equals(s, manifest, composed)
	ptest.RunAndValidate(t, p)
	sameFiles(t, testfiles.TreeChecksums(t, out), testfiles.TreeChecksums(t, composedOut))

	p, s = beam.NewPipelineWithRoot()
	commit.Output = filepath.Join(t.TempDir(), "emb")
	beam.ParDo(s, commit, beam.Impulse(s), beam.SideInput{Input: beam.CreateList(s, composed.Files[1:])})
	if err := ptest.Run(p); err == nil || !strings.Contains(err.Error(), embeddings.FileName(0, 4)+" was not written") {
		t.Errorf("Commit without the first range's file: %v", err)
	}
}
