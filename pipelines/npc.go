package pipelines

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"

	"github.com/dcl-beam/dcl-beam/analysis"
	"github.com/dcl-beam/dcl-beam/analysis/figures"
	"github.com/dcl-beam/dcl-beam/internal/progress"
	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/internal/usage"
	"github.com/dcl-beam/dcl-beam/shards/embeddings"
)

// The NPC pipeline (NPC) computes the paper's Fig. 1 from projection embeddings of view
// pairs:
//
//	Impulse ─ DrawBatches ─ batches ─ Reshuffle ─ Multipliers ─ KV<batch size, q> ─ GroupByKey
//	                                                                                    │
//	          Impulse ─ WriteReport ─(side input)─ stats per batch size ─ Summarise ───┘
//
// DrawBatches reads the pairs (it holds them in memory: 1.3 GB for ImageNet's 1.28M pairs of
// 128-d projections) and, for every batch size, draws the batches of
// analysis.NPCBatches (seeded, so any worker would draw the same) and emits each with its
// vectors. Multipliers computes q for every anchor of a batch (analysis.NPCBatch, float64).
// Summarise collects one batch size's values (analysis.QAccumulator, whose statistics do not
// depend on arrival order) and WriteReport writes npc.json, npc.md and the two figures.

// NPC output file names, in the output directory.
const (
	NPCReportName      = "npc.json"
	NPCTableName       = "npc.md"
	NPCSummaryPlotName = "npc-mean-cv.png"      // Fig. 1(a): mean q and C_v against batch size
	NPCDistPlotName    = "npc-distribution.png" // Fig. 1(b): the distribution of q per batch size
)

// NPCOptions is what an NPC run is asked to do: `dcl npc` fills it from its flags.
type NPCOptions struct {
	// Embeddings holds view pairs: each row is view 1's projection followed by view 2's
	// (dcl embed --views=2 writes them so, and says so in its metadata).
	Embeddings string
	// Concatenated accepts a file without that metadata (another tool's) as pairs.
	Concatenated bool
	BatchSizes   []int   // default analysis.DefaultNPCBatchSizes
	Temperature  float64 // 0: the temperature the encoder was trained with (metadata)
	Seed         uint64
	Passes       int // default 1
	MaxBatches   int // per batch size; 0: no cap
	Bins         int // histogram bins; default analysis.DefaultHistogramBins
	// Name labels the series in the table and plots; default "q at τ=…".
	Name   string
	Output string // the output directory (local or gs://)
}

// NPCJob is a planned NPC run.
type NPCJob struct {
	Opts  NPCOptions
	Pairs int64
	Dim   int // of one view
	// LeftOut are the default batch sizes larger than the embeddings' view pairs, which the
	// job leaves out (sizes asked for explicitly must fit, or planning fails).
	LeftOut []int
	// Display shows the job's progress while it runs in this process (set it after
	// planning; see watch).
	Display  progress.Options
	progress *Progress
}

// PlanNPC checks the options against the embeddings' metadata and sizes.
func PlanNPC(ctx context.Context, o NPCOptions) (*NPCJob, error) {
	if o.Embeddings == "" || o.Output == "" {
		return nil, errors.New("both the embeddings and an output directory are needed")
	}
	defaults := len(o.BatchSizes) == 0
	if defaults {
		o.BatchSizes = analysis.DefaultNPCBatchSizes()
	}
	if o.Passes <= 0 {
		o.Passes = 1
	}
	if o.Bins <= 0 {
		o.Bins = analysis.DefaultHistogramBins
	}
	// The values alone first: a wrong one is a usage error, whatever the embeddings hold.
	if o.Temperature < 0 || math.IsNaN(o.Temperature) || math.IsInf(o.Temperature, 0) {
		return nil, usage.Errorf("--temperature=%v: want a positive number, or 0 for the one the encoder was trained with", o.Temperature)
	}
	for _, b := range o.BatchSizes {
		if b < 2 {
			return nil, usage.Errorf("--batch-sizes: batch size %d: want at least 2 (a batch needs negatives)", b)
		}
	}
	set, err := inspectEmbeddings(ctx, o.Embeddings)
	if err != nil {
		return nil, err
	}
	switch views := set.Meta[embeddings.MetaViews]; {
	case views == "2" || o.Concatenated:
	case set.Meta == nil:
		return nil, fmt.Errorf("%s: the file has no dcl metadata to say whether its rows are view pairs: pass --concatenated if each row is view 1's vector followed by view 2's", o.Embeddings)
	default:
		return nil, fmt.Errorf("%s: not view pairs (metadata views=%q): embed augmented shards with --views=2, or pass --concatenated if each row is view 1's vector followed by view 2's", o.Embeddings, views)
	}
	if set.Dim%2 != 0 {
		return nil, fmt.Errorf("%s: %d values per row cannot be two views of equal length", o.Embeddings, set.Dim)
	}
	if o.Temperature == 0 {
		t, err := strconv.ParseFloat(set.Meta[embeddings.MetaTemperature], 64)
		if err != nil || !(t > 0) {
			return nil, fmt.Errorf("%s records no training temperature: give --temperature", o.Embeddings)
		}
		o.Temperature = t
	}
	var fit, leftOut []int
	for _, b := range o.BatchSizes {
		switch {
		case int64(b) <= set.Rows:
			fit = append(fit, b)
		case defaults:
			leftOut = append(leftOut, b)
		default:
			return nil, usage.Errorf("--batch-sizes: batch size %d: want 2 to the %d view pairs of %s", b, set.Rows, o.Embeddings)
		}
	}
	if len(fit) == 0 {
		return nil, usage.Errorf("%s holds %d view pairs, fewer than the smallest default batch size %d: give --batch-sizes", o.Embeddings, set.Rows, o.BatchSizes[0])
	}
	o.BatchSizes = fit
	if o.Name == "" {
		o.Name = "τ=" + strconv.FormatFloat(o.Temperature, 'g', -1, 64)
	}
	return &NPCJob{Opts: o, Pairs: set.Rows, Dim: set.Dim / 2, LeftOut: leftOut}, nil
}

// The elements between the steps are Go structs that Beam encodes with schema row coders.
func init() {
	registerElement[npcBatch]()
	registerElement[npcMultipliers]()
	registerElement[analysis.NPCStats]()
	register.DoFn3x1[context.Context, []byte, func(npcBatch), error](&drawBatchesFn{})
	register.DoFn3x1[context.Context, npcBatch, func(int, npcMultipliers), error](&multipliersFn{})
	register.DoFn4x1[context.Context, int, func(*npcMultipliers) bool, func(analysis.NPCStats), error](&summariseFn{})
	register.DoFn3x1[context.Context, []byte, func(*analysis.NPCStats) bool, error](&writeNPCReportFn{})
	register.Emitter1[npcBatch]()
	register.Emitter2[int, npcMultipliers]()
	register.Emitter1[analysis.NPCStats]()
	register.Iter1[npcMultipliers]()
	register.Iter1[analysis.NPCStats]()
}

var npcBatches = beam.NewCounter(EvalMetricsNamespace, "npc_batches")

// NPC adds the NPC pipeline of job to s. It writes the report files to job.Opts.Output.
func NPC(s beam.Scope, job *NPCJob) {
	s = s.Scope("NPC")
	o := job.Opts
	batches := beam.ParDo(s.Scope("DrawBatches"), &drawBatchesFn{
		Embeddings: o.Embeddings, BatchSizes: o.BatchSizes, Seed: o.Seed, Passes: o.Passes, MaxBatches: o.MaxBatches,
	}, beam.Impulse(s))
	qs := beam.ParDo(s.Scope("Multipliers"), &multipliersFn{Temperature: o.Temperature, ProgressID: job.progress.id()}, beam.Reshuffle(s, batches))
	stats := beam.ParDo(s.Scope("Summarise"), &summariseFn{Bins: o.Bins}, beam.GroupByKey(s, qs))
	beam.ParDo0(s.Scope("WriteReport"), &writeNPCReportFn{
		Output: o.Output, Name: o.Name, Source: o.Embeddings, Temperature: o.Temperature, Seed: o.Seed,
		Pairs: job.Pairs, BatchSizes: o.BatchSizes,
	}, beam.Impulse(s), beam.SideInput{Input: stats})
}

// npcBatch is one batch with its vectors: z1 and z2 hold Size rows of Dim values.
type npcBatch struct {
	Size, Index, Dim int
	Z1, Z2           []float32
}

// validate checks a batch's sizes agree.
func (b *npcBatch) validate() error {
	if b.Dim <= 0 || len(b.Z1) != b.Size*b.Dim || len(b.Z2) != len(b.Z1) {
		return fmt.Errorf("NPC batch %d of size %d: %d and %d values for %d pairs of dimension %d", b.Index, b.Size, len(b.Z1), len(b.Z2), b.Size, b.Dim)
	}
	return nil
}

// npcMultipliers are the NPC multipliers of one batch (of the size it is keyed by).
type npcMultipliers struct {
	Index int
	Q     []float64
}

// loadPairs reads view pairs stored as concatenated rows into two blocks of vectors.
func loadPairs(ctx context.Context, path string) (z1, z2 analysis.Vectors, err error) {
	r, err := embeddings.Open(ctx, path, 0)
	if err != nil {
		return z1, z2, err
	}
	defer r.Close()
	d := r.Dim() / 2
	z1 = analysis.Vectors{Dim: d, Data: make([]float32, 0, r.Rows()*int64(d))}
	z2 = analysis.Vectors{Dim: d, Data: make([]float32, 0, r.Rows()*int64(d))}
	for {
		b, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return z1, z2, err
		}
		if b.Dim != 2*d {
			return z1, z2, fmt.Errorf("%s: rows of %d and %d values", path, 2*d, b.Dim)
		}
		for i := range b.Len() {
			v := b.Vector(i)
			z1.Data = append(z1.Data, v[:d]...)
			z2.Data = append(z2.Data, v[d:]...)
		}
	}
	if err := z1.Validate(path + " (view 1)"); err != nil {
		return z1, z2, err
	}
	return z1, z2, z2.Validate(path + " (view 2)")
}

// drawBatchesFn reads the pairs and emits every batch of every size with its vectors.
type drawBatchesFn struct {
	Embeddings string
	BatchSizes []int
	Seed       uint64
	Passes     int
	MaxBatches int
}

func (f *drawBatchesFn) ProcessElement(ctx context.Context, _ []byte, emit func(npcBatch)) error {
	z1, z2, err := loadPairs(ctx, f.Embeddings)
	if err != nil {
		return err
	}
	for _, size := range f.BatchSizes {
		batches, err := analysis.NPCBatches(z1.Len(), size, f.Seed, f.Passes, f.MaxBatches)
		if err != nil {
			return fmt.Errorf("%s: %w", f.Embeddings, err)
		}
		for i, idx := range batches {
			b := npcBatch{Size: size, Index: i, Dim: z1.Dim}
			for _, row := range idx {
				b.Z1 = append(b.Z1, z1.Row(row)...)
				b.Z2 = append(b.Z2, z2.Row(row)...)
			}
			emit(b)
		}
	}
	return nil
}

// multipliersFn computes the NPC multipliers of one batch, keyed by its batch size.
type multipliersFn struct {
	Temperature float64
	ProgressID  string

	progress *Progress
}

func (f *multipliersFn) Setup() { f.progress = lookupProgress(f.ProgressID) }

func (f *multipliersFn) ProcessElement(ctx context.Context, b npcBatch, emit func(int, npcMultipliers)) error {
	if err := b.validate(); err != nil {
		return err
	}
	idx := make([]int, b.Size)
	for i := range idx {
		idx[i] = i
	}
	q := analysis.NPCBatch(analysis.Vectors{Dim: b.Dim, Data: b.Z1}, analysis.Vectors{Dim: b.Dim, Data: b.Z2}, idx, f.Temperature)
	npcBatches.Inc(ctx, 1)
	f.progress.addDone(1)
	emit(b.Size, npcMultipliers{Index: b.Index, Q: q})
	return nil
}

// summariseFn turns one batch size's multipliers into its statistics.
type summariseFn struct {
	Bins int
}

func (f *summariseFn) ProcessElement(ctx context.Context, size int, batches func(*npcMultipliers) bool, emit func(analysis.NPCStats)) error {
	var acc analysis.QAccumulator
	seen := map[int]bool{}
	for {
		var m npcMultipliers
		if !batches(&m) {
			break
		}
		if seen[m.Index] {
			continue // a retried bundle's duplicate
		}
		seen[m.Index] = true
		acc.Add(m.Q...)
	}
	emit(acc.Stats(size, len(seen), f.Bins))
	return nil
}

// writeNPCReportFn writes the report, the table and the figures once every batch size is
// summarised.
type writeNPCReportFn struct {
	Output      string
	Name        string
	Source      string
	Temperature float64
	Seed        uint64
	Pairs       int64
	BatchSizes  []int
}

func (f *writeNPCReportFn) ProcessElement(ctx context.Context, _ []byte, stats func(*analysis.NPCStats) bool) error {
	bySize := map[int]analysis.NPCStats{}
	for {
		var st analysis.NPCStats
		if !stats(&st) {
			break
		}
		bySize[st.BatchSize] = st
	}
	report := analysis.NPCReport{Name: f.Name, Source: f.Source, Temperature: f.Temperature, Seed: f.Seed, Pairs: int(f.Pairs)}
	sizes := slices.Clone(f.BatchSizes)
	slices.Sort(sizes)
	for _, size := range slices.Compact(sizes) {
		st, ok := bySize[size]
		if !ok {
			return fmt.Errorf("batch size %d produced no multipliers", size)
		}
		report.Stats = append(report.Stats, st)
	}
	return WriteNPCReport(ctx, f.Output, []analysis.NPCReport{report})
}

// WriteNPCReport writes reports (one series each: a method or a temperature) to dir:
// npc.json (the report, or an array of them when there are several), npc.md (the table) and
// the two figures of the paper's Fig. 1, with one line or panel per series. npc.json goes
// last: its presence says the report is complete (reproduce skips a stage whose result is
// there), so a process killed while drawing the figures leaves a report to redo.
func WriteNPCReport(ctx context.Context, dir string, reports []analysis.NPCReport) error {
	var md strings.Builder
	fmt.Fprintf(&md, "# NPC multiplier q by batch size\n\n%s", analysis.NPCTable(reports).Markdown())
	if err := storage.WriteFile(ctx, storage.Join(dir, NPCTableName), []byte(md.String())); err != nil {
		return fmt.Errorf("writing %s: %w", storage.Join(dir, NPCTableName), err)
	}
	meanQ, cv := figures.NPCSummaryCharts(reports)
	if err := figures.SavePNG(ctx, storage.Join(dir, NPCSummaryPlotName), 1200, 450, 2, meanQ, cv); err != nil {
		return err
	}
	var dists []figures.Panel
	for _, r := range reports {
		dists = append(dists, figures.NPCDistributionChart(r))
	}
	if err := figures.SavePNG(ctx, storage.Join(dir, NPCDistPlotName), 600*min(2, len(dists)), 450*((len(dists)+1)/2), 2, dists...); err != nil {
		return err
	}
	var js any = reports
	if len(reports) == 1 {
		js = reports[0]
	}
	return storage.SaveJSON(ctx, storage.Join(dir, NPCReportName), js)
}

// batches is the number of batches the job draws, of every size (0 when it is not known).
func (job *NPCJob) batches() int64 {
	var n int64
	if job.Display.Mode == progress.Off {
		return 0 // drawing the batches to count them costs time for nothing
	}
	for _, size := range job.Opts.BatchSizes {
		b, err := analysis.NPCBatches(int(job.Pairs), size, job.Opts.Seed, job.Opts.Passes, job.Opts.MaxBatches)
		if err != nil {
			return 0
		}
		n += int64(len(b))
	}
	return n
}

// RunNPC builds the NPC pipeline and runs it on the runner the Beam flags select, then reads
// back the report.
func RunNPC(ctx context.Context, job *NPCJob) (*analysis.NPCReport, error) {
	var end func(bool)
	job.progress, end = watch(job.Display, "npc", job.batches(), "batches", "")
	p, s := beam.NewPipelineWithRoot()
	NPC(s, job)
	_, err := runPipeline(ctx, "npc", p)
	end(err == nil)
	if err != nil {
		return nil, err
	}
	if submitOnly() {
		return nil, nil // translated (--dry_run) or submitted (--async): nothing to read yet
	}
	var r analysis.NPCReport
	if err := storage.LoadJSON(ctx, storage.Join(job.Opts.Output, NPCReportName), &r); err != nil {
		return nil, fmt.Errorf("the pipeline finished but wrote no report: %w", err)
	}
	return &r, nil
}
