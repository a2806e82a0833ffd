package pipelines

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/metrics"

	"github.com/dcl-beam/dcl-beam/internal/progress"
	"github.com/dcl-beam/dcl-beam/internal/rawname"
	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/shards"
	"github.com/dcl-beam/dcl-beam/transforms/augment"
	"github.com/dcl-beam/dcl-beam/transforms/datasets"
)

// The preprocess pipeline (Preprocess) turns one split of a dataset into a shard directory:
//
//	Create(units) ─ GroupByKey ─ ReadUnits ── KV<shard, batch of refs> ───────────┐
//	                                │   └─ dead letters, unit stats                │
//	Impulse ─ PrepareOutput(stats) ─┼── KV<shard, config>, one per shard ─ Flatten ─ GroupByKey
//	                                │                                                  │
//	                                config                                        WriteParts
//	                                │                                  shard infos, dead letters
//	Impulse ─ Commit(config, infos, dead letters, stats) ──────────────────────────────┘
//
// ReadUnits streams each unit's records once, hashes them (the source checksum), reports bad
// records, and for every record and pass makes only a small reference (ref) to the shard
// that will hold the record (shards.Place), sent in batches per unit and shard. The
// GroupByKey therefore moves references, never image bytes: prism keeps all of a
// GroupByKey's data in memory. PrepareOutput runs once, after every unit has been read and
// before any shard is written: it fixes the configuration (with the source checksum), calls
// shards.Prepare and sends the configuration to every shard. WriteParts sorts a shard's
// references into row order, re-reads each record from the source by reference, decodes,
// augments and writes the shard (atomically, under a temporary name, with
// shards.NewWriter) and emits its ShardInfo. Commit runs once, after every shard is
// written: it writes the dead letters, enforces MaxBadFraction and calls shards.Commit,
// which writes manifest.json last.

// DefaultShardBytes is the size a shard aims at when the number of shards per pass is not
// given: large enough that listing and opening shards costs nothing next to reading them,
// small enough that a pass spreads over many readers and writers.
const DefaultShardBytes = 256 << 20

// Counter names of the preprocess pipeline, in namespace MetricsNamespace.
const (
	MetricsNamespace     = "dcl.preprocess"
	MetricRecordsRead    = "records_read"
	MetricRowsWritten    = "rows_written"
	MetricViewsWritten   = "views_written"
	MetricBytesWritten   = "bytes_written"
	MetricDeadLetters    = "dead_letters"
	MetricShardsWritten  = "shards_written"
	MetricRecordsFetched = "records_fetched"
)

// PreprocessOptions is what a preprocessing run is asked to do: `dcl preprocess` fills it
// from its flags.
type PreprocessOptions struct {
	// Spec says what to read: dataset, input, split and the readers' options.
	Spec datasets.Spec
	// Output is the dataset directory to write, local or gs://.
	Output string
	// Augment is the augmentation configuration (a preset with overrides). An evaluation
	// preset (Eval, preset "none") writes single-view shards: one centred view per image.
	Augment augment.Config
	// Passes is E, the number of augmented passes; each writes one row per image. It must
	// be 1 for evaluation shards and base shards (Online).
	Passes int
	// Online writes base shards (`--views=online`): each image once, in the form views are
	// cut from (shards.Config.Online), for the trainer to make every epoch's views on the fly.
	Online bool
	// MaxSide, when positive, shrinks images whose longer side is larger before any view is
	// cut (shards.Config.MaxSide), in both modes.
	MaxSide int
	// Seed seeds the augmentations and the placement of rows in shards.
	Seed uint64
	// Parts is the number of shards per pass; 0 chooses it from the size of the output
	// (DefaultParts).
	Parts int
	// Encoding of the views; "" means DefaultEncoding.
	Encoding shards.Encoding
	// Channels of the views, 1 or 3; 0 means the dataset's (datasets.Descriptor.Channels). Sources with the other
	// count are converted (grey to RGB by copying, RGB to grey by ITU-R 601-2 luma).
	Channels int
	// Limit, when positive, keeps only the first Limit records of the split: the records
	// with the smallest Record.Index, that is the first files of the split in the dataset's
	// published order (CIFAR data_batch_1 first, IDX files from the start, image folders by
	// class folder then sorted file name). Plans whose counts are only estimates (ImageNet
	// tars) cannot be limited.
	Limit int64
	// MaxBadFraction is the largest share of dead letters (records that gave no rows) a run
	// accepts; above it the run fails after writing the dead letters and without a manifest.
	MaxBadFraction float64
	// Overwrite allows replacing a dataset of another configuration in Output.
	Overwrite bool
	// CodeVersion is recorded in every shard and the manifest.
	CodeVersion string
	// Progress shows the records read and the rows written while the pipeline runs in this
	// process (prism, direct, a LOOPBACK job server); workers in other processes cannot
	// report them, and nothing is shown.
	Progress progress.Options
}

// PreprocessJob is a planned run: the units to read and the configuration of the shards.
type PreprocessJob struct {
	Plan datasets.Plan
	// Config is the shards' configuration without its SourceChecksum, which the pipeline
	// computes from the bytes it reads.
	Config         shards.Config
	Output         string
	MaxBadFraction float64
	Overwrite      bool
	// Display shows the run's progress (PreprocessOptions.Progress); progress counts what
	// the DoFns did while RunPreprocess runs (nil: nothing counts; see watch).
	Display  progress.Options
	progress *Progress

	// failAfterRows, in tests, makes WriteParts fail after writing that many rows of a
	// shard: a worker dying part-way.
	failAfterRows int
}

// DefaultEncoding stores views of up to 96 pixels raw (small, and decoding costs nothing)
// and larger ones as JPEG (a 224×224 RGB view is 147 KiB raw, about 30 KiB as JPEG).
func DefaultEncoding(size int) shards.Encoding {
	if size <= 96 {
		return shards.Raw
	}
	return shards.JPEG
}

// DefaultParts chooses the shards per pass so that each holds about DefaultShardBytes.
func DefaultParts(records int64, cfg shards.Config) int {
	view := float64(cfg.Height * cfg.Width * cfg.Channels)
	switch cfg.Encoding {
	case shards.JPEG:
		view /= 5 // quality 95 on photographs
	case shards.PNG:
		view /= 2
	}
	total := float64(records) * (view*float64(cfg.Views) + 64)
	parts := int(math.Ceil(total / DefaultShardBytes))
	return max(1, min(parts, int(records), 99999))
}

// DefaultGroupRows is the number of rows per row group: the rows whose stored views fill
// shards.DefaultRowGroupBytes, counted as the writer counts bytes (whole batches of
// shards.DefaultBatchBytes), so that raw views are cut where a writer cutting by bytes cuts
// them; encoded views are estimated as DefaultParts estimates them. It depends on the views
// only, so stored passes and base shards of the same views share it.
func DefaultGroupRows(cfg shards.Config) int {
	row := float64(cfg.Height * cfg.Width * cfg.Channels * cfg.Views)
	switch cfg.Encoding {
	case shards.JPEG:
		row /= 5
	case shards.PNG:
		row /= 2
	}
	b := max(1, int(row))
	batch := (shards.DefaultBatchBytes + b - 1) / b
	batches := (shards.DefaultRowGroupBytes + batch*b - 1) / (batch * b)
	return batch * batches
}

// PreprocessAugment is the augmentation preprocessing applies to dataset d: preset (empty:
// the dataset's) at size (0: the dataset's view size), with overrides applied in order and
// the result validated.
func PreprocessAugment(d datasets.Descriptor, preset string, size int, overrides []augment.Override) (augment.Config, error) {
	c, err := augment.Preset(cmp.Or(preset, d.Augment), cmp.Or(size, d.ViewSize))
	if err != nil {
		return augment.Config{}, err
	}
	return c, augment.ApplyOverrides(&c, overrides)
}

// PlanPreprocess checks the options, plans the split (datasets.MakePlan: listings and
// headers only) and fixes the shards' configuration. Its errors are the user's to fix.
func PlanPreprocess(ctx context.Context, o PreprocessOptions) (*PreprocessJob, error) {
	if o.Output == "" {
		return nil, errors.New("no output directory given")
	}
	if err := o.Augment.Validate(); err != nil {
		return nil, fmt.Errorf("augmentation: %w", err)
	}
	views := 2
	if o.Augment.Eval {
		views = 1
		if o.Passes != 1 {
			return nil, fmt.Errorf("evaluation shards (preset %s) have one pass, not %d", o.Augment.Preset, o.Passes)
		}
	}
	if o.Passes < 1 {
		return nil, fmt.Errorf("passes = %d: want at least 1", o.Passes)
	}
	if o.Online && (o.Augment.Eval || o.Passes != 1) {
		return nil, fmt.Errorf("online views are made by the trainer from one base pass: they need an augmentation preset (not %s) and no stored passes (got %d)", o.Augment.Preset, o.Passes)
	}
	if o.MaxSide < 0 {
		return nil, fmt.Errorf("max side %d: want 0 (keep images as published) or more", o.MaxSide)
	}
	if o.Parts < 0 || o.Parts > 99999 {
		return nil, fmt.Errorf("shards per pass = %d: want 1 to 99999, or 0 to choose from the dataset's size", o.Parts)
	}
	if !(o.MaxBadFraction >= 0 && o.MaxBadFraction <= 1) {
		return nil, fmt.Errorf("max bad fraction %g: want a number in [0, 1]", o.MaxBadFraction)
	}
	if o.Limit < 0 {
		return nil, fmt.Errorf("limit %d: want 0 (all records) or more", o.Limit)
	}
	spec, d, err := o.Spec.Resolve()
	if err != nil {
		return nil, err
	}
	channels := cmp.Or(o.Channels, d.Channels)
	if channels != 1 && channels != 3 {
		return nil, fmt.Errorf("channels = %d: want 1 or 3", channels)
	}
	enc := o.Encoding
	if enc == "" {
		enc = DefaultEncoding(o.Augment.Size)
	}
	if _, err := shards.ParseEncoding(string(enc)); err != nil {
		return nil, err
	}
	if spec.Split == "" {
		spec.Split = "train"
	}
	plan, err := datasets.MakePlan(ctx, spec)
	if err != nil {
		return nil, err
	}
	for _, w := range plan.Warnings {
		slog.Warn(w)
	}
	if plan.Ignored > 0 {
		slog.Info("files that are not records were ignored", "input", spec.Input, "count", plan.Ignored, "examples", plan.IgnoredExamples)
	}
	if o.Limit > 0 {
		if plan, err = limitPlan(plan, o.Limit); err != nil {
			return nil, err
		}
	}
	augJSON, err := json.Marshal(o.Augment)
	if err != nil {
		return nil, fmt.Errorf("encoding the augmentation config: %w", err)
	}
	version := o.CodeVersion
	if version == "" {
		version = "unknown"
	}
	cfg := shards.Config{
		Dataset: spec.Dataset, Split: spec.Split, Preset: o.Augment.Preset, Augment: augJSON,
		Seed: o.Seed, Passes: o.Passes, Parts: o.Parts, Views: views, Encoding: enc,
		Height: o.Augment.Size, Width: o.Augment.Size, Channels: channels,
		CodeVersion: version, SourceChecksum: pendingChecksum, Classes: plan.Classes, MaxSide: o.MaxSide,
	}
	// The manifest names every file or folder the split reads (their digests come with the
	// records), so that a reproduction can tell that its test split shares no image with
	// the splits it trains on. The names are text (rawname.Text): a manifest is JSON, and
	// Text keeps names distinct and a folder's name the start of its files' names.
	for _, src := range plan.Sources() {
		cfg.Sources = append(cfg.Sources, shards.Source{Name: rawname.Text(src)})
	}
	if cfg.Preset == "" {
		return nil, errors.New("augmentation config names no preset")
	}
	// The layout (shards per pass, rows per row group) is that of the stored views, in both
	// modes, so that base shards are read in the order of the passes they stand for.
	if cfg.Parts == 0 {
		cfg.Parts = DefaultParts(plan.Records, cfg)
	}
	if o.Online || cfg.Encoding != shards.Raw {
		// Raw views have a fixed size, and a writer cutting by bytes cuts them every
		// DefaultGroupRows rows already: their configuration stays what it always was.
		cfg.GroupRows = DefaultGroupRows(cfg)
	}
	cfg.Online = o.Online
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.SourceChecksum = ""
	return &PreprocessJob{Plan: plan, Config: cfg, Output: o.Output, MaxBadFraction: o.MaxBadFraction,
		Overwrite: o.Overwrite, Display: o.Progress}, nil
}

// pendingChecksum stands in for the source checksum while the config is validated before
// the pipeline has computed it.
const pendingChecksum = "pending"

// limitPlan keeps the first n records of a plan, in plan (Index) order.
func limitPlan(p datasets.Plan, n int64) (datasets.Plan, error) {
	if !p.Exact {
		return p, fmt.Errorf("--limit needs a split whose record count is known before reading; %s %s is read from tars, "+
			"whose members are counted only when read: extract them into class folders, or drop the limit", p.Dataset, p.Split)
	}
	if n >= p.Records {
		return p, nil
	}
	var units []datasets.Unit
	left := n
	for _, u := range p.Units {
		if left == 0 {
			break
		}
		if u.Records > left {
			u = u.Head(left)
		}
		left -= u.Records
		units = append(units, u)
	}
	p.Units, p.Records = units, n
	return p, nil
}

// PreprocessResult is what a finished run reports.
type PreprocessResult struct {
	// Manifest is the committed dataset's manifest; nil when the job was only submitted
	// (--async) or translated (--dry_run).
	Manifest *shards.Manifest
	// Metrics are the pipeline's counters, as the runner reported them (zero when it
	// reports none).
	Metrics PreprocessMetrics
	Wall    time.Duration
	// DryRun is set when the runner only translated the job (Dataflow's --dry_run); when
	// Manifest is nil and DryRun is not, the job was submitted (--async) and runs elsewhere.
	DryRun bool
}

// PreprocessMetrics are the pipeline's Beam counters.
type PreprocessMetrics struct {
	RecordsRead, RecordsFetched, RowsWritten, ViewsWritten, BytesWritten, DeadLetters, ShardsWritten int64
}

// Summary is the one line `dcl preprocess` ends with.
func (r *PreprocessResult) Summary(dir string) string {
	switch {
	case r.Manifest == nil && r.DryRun:
		return "dry run: the job was translated, not submitted; nothing was read or written"
	case r.Manifest == nil:
		return fmt.Sprintf("the job was submitted and runs on its own; %s will hold manifest.json when it succeeds", dir)
	}
	m := r.Manifest
	views := fmt.Sprintf("%d views", m.Views())
	if m.Config.Online {
		views = "base images: the trainer makes the views"
	}
	line := fmt.Sprintf("%s %s: %d records → %d rows (%s) in %d shards, %s, %d dead letters, wall %s → %s",
		m.Config.Dataset, m.Config.Split, m.Records, m.Rows, views, len(m.Shards), progress.Bytes(m.Bytes),
		m.DeadLetters.Count, r.Wall.Round(time.Millisecond), dir)
	return line + modesNote(&m.Config)
}

// modesNote is what a dataset's summary adds when its views are other pixels than those of
// the other mode with the same flags (shards.Config.ModesDiffer): a run on it cannot be
// compared with a run on the other.
func modesNote(c *shards.Config) string {
	if !c.ModesDiffer() {
		return ""
	}
	if c.Online {
		return "; views made on the fly are raw pixels, stored views of these flags JPEG q95: runs on the two differ (--encoding=raw stores views both modes share)"
	}
	return "; views stored as JPEG q95, views made on the fly (--views=online) raw pixels: runs on the two differ (--encoding=raw stores views both modes share)"
}

// Preprocess adds the preprocessing pipeline of job to s. It writes job.Output and outputs
// nothing: the committed manifest is the result.
func Preprocess(s beam.Scope, job *PreprocessJob) {
	s = s.Scope("Preprocess")
	cfg := job.Config
	progressID := job.progress.id()

	tasks := make([]unitTask, len(job.Plan.Units))
	for i, u := range job.Plan.Units {
		tasks[i] = unitTask{Seq: i, Unit: u}
	}

	// Create emits the units in one bundle. Grouping them by their number spreads them over
	// the workers: a Reshuffle would too on Dataflow, but prism runs a Reshuffle's output in
	// one bundle and a GroupByKey's keys in parallel bundles.
	units := beam.GroupByKey(s, beam.ParDo(s, keyByUnit, beam.CreateList(s, tasks)))
	refs, dead, stats := beam.ParDo3(s.Scope("ReadUnits"), &readUnitsFn{
		Seed: cfg.Seed, Passes: cfg.Passes, Parts: cfg.Parts, ProgressID: progressID,
	}, units)

	toShards, config := beam.ParDo2(s.Scope("PrepareOutput"), &prepareOutputFn{
		Output: job.Output, Config: cfg, Overwrite: job.Overwrite, Units: len(tasks),
		UnitSources: unitSources(job.Plan.Units, cfg.Sources),
	}, beam.Impulse(s), beam.SideInput{Input: stats})
	byShard := beam.GroupByKey(s, beam.Flatten(s, refs, toShards))

	infos, writeDead := beam.ParDo2(s.Scope("WriteParts"), &writePartFn{
		Output: job.Output, Units: fetchUnits(job.Plan.Units), ProgressID: progressID, FailAfterRows: job.failAfterRows,
	}, byShard)

	beam.ParDo0(s.Scope("Commit"), &commitFn{
		Output: job.Output, MaxBadFraction: job.MaxBadFraction,
	}, beam.Impulse(s), beam.SideInput{Input: config}, beam.SideInput{Input: infos},
		beam.SideInput{Input: beam.Flatten(s, dead, writeDead)}, beam.SideInput{Input: stats})
}

// unitSources is, for each unit, the index of its source in the shards' Config.Sources.
func unitSources(units []datasets.Unit, sources []shards.Source) []int {
	index := make(map[string]int, len(sources))
	for i, s := range sources {
		index[s.Name] = i
	}
	out := make([]int, len(units))
	for i, u := range units {
		out[i] = index[rawname.Text(u.Source())]
	}
	return out
}

// fetchUnits is what WriteParts needs of the units to re-read records (Unit.ForFetch), so
// that the DoFn's serialised form stays small.
func fetchUnits(units []datasets.Unit) []datasets.Unit {
	out := make([]datasets.Unit, len(units))
	for i, u := range units {
		out[i] = u.ForFetch()
	}
	return out
}

// RunPreprocess builds the pipeline and runs it on the runner the Beam flags select
// (prism in process by default), then reads back the manifest. Before the run it refuses,
// unless Overwrite, an output directory whose manifest describes another dataset (the
// pipeline checks again, with the source checksum, before it writes anything).
func RunPreprocess(ctx context.Context, job *PreprocessJob) (*PreprocessResult, error) {
	start := time.Now()
	if !submitOnly() {
		if err := checkOutput(ctx, job); err != nil {
			return nil, err
		}
	}
	counts, end := watchPreprocess(job.Display, job)
	job.progress = counts
	p, s := beam.NewPipelineWithRoot()
	Preprocess(s, job)
	pr, err := runPipeline(ctx, "preprocess", p)
	end(err == nil)
	res := &PreprocessResult{Wall: time.Since(start), DryRun: DryRun()}
	if err != nil {
		return res, err
	}
	if pr != nil {
		res.Metrics = preprocessMetrics(pr.Metrics().AllMetrics())
	}
	if submitOnly() {
		return res, nil
	}
	m, err := shards.ReadManifest(ctx, job.Output)
	if err != nil {
		return res, fmt.Errorf("the pipeline finished but the output has no valid manifest: %w", err)
	}
	res.Manifest = m
	return res, nil
}

// DryRun reports Dataflow's --dry_run: the job is translated, not run.
func DryRun() bool {
	f := flag.Lookup("dry_run")
	return f != nil && f.Value.String() == "true"
}

// checkOutput refuses early, with the same error shards.Prepare gives, an output directory
// whose manifest describes another dataset: the pipeline would only find out after reading
// the whole input. Sources are left out of the comparison, since their checksum is known
// only then.
func checkOutput(ctx context.Context, job *PreprocessJob) error {
	if job.Overwrite {
		return shards.CheckOverwritable(ctx, job.Output)
	}
	p := storage.Join(job.Output, shards.ManifestName)
	ok, err := storage.Exists(ctx, p)
	if err != nil || !ok {
		return err
	}
	data, err := storage.ReadFile(ctx, p)
	if err != nil {
		return err
	}
	var m struct {
		Format int           `json:"format"`
		Config shards.Config `json:"config"`
	}
	if err := json.Unmarshal(data, &m); err != nil || m.Format != shards.FormatVersion {
		return &shards.DifferentDatasetError{Dir: job.Output, Where: shards.ManifestName,
			Diffs: []string{"it is not a manifest of this format version"}}
	}
	have, want := m.Config, job.Config
	have.SourceChecksum, have.Sources = "", nil
	want.SourceChecksum, want.Sources = "", nil
	if d := have.Diff(want); len(d) > 0 {
		return &shards.DifferentDatasetError{Dir: job.Output, Where: shards.ManifestName, Diffs: d}
	}
	return nil
}

func preprocessMetrics(r metrics.QueryResults) PreprocessMetrics {
	var m PreprocessMetrics
	for _, c := range r.Counters() {
		if c.Key.Namespace != MetricsNamespace {
			continue
		}
		v := c.Committed
		if v == 0 {
			v = c.Attempted
		}
		switch c.Key.Name {
		case MetricRecordsRead:
			m.RecordsRead += v
		case MetricRecordsFetched:
			m.RecordsFetched += v
		case MetricRowsWritten:
			m.RowsWritten += v
		case MetricViewsWritten:
			m.ViewsWritten += v
		case MetricBytesWritten:
			m.BytesWritten += v
		case MetricDeadLetters:
			m.DeadLetters += v
		case MetricShardsWritten:
			m.ShardsWritten += v
		}
	}
	return m
}
