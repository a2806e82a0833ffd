package pipelines

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"

	"github.com/dcl-beam/dcl-beam/gpu"
	"github.com/dcl-beam/dcl-beam/internal/progress"
	"github.com/dcl-beam/dcl-beam/internal/rawname"
	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/internal/usage"
	"github.com/dcl-beam/dcl-beam/shards"
	"github.com/dcl-beam/dcl-beam/shards/embeddings"
	"github.com/dcl-beam/dcl-beam/trainstep"
	"github.com/dcl-beam/dcl-beam/transforms"
	"github.com/dcl-beam/dcl-beam/verify"
)

// The embed pipeline (Embed) runs a trained encoder over a shard dataset and writes the
// embeddings:
//
//	Create(ranges) ─ Reshuffle ─ EmbedRange ─ file infos ─(side input)─ Impulse ─ Commit
//
// Each range is a run of rows of one pass in the shards' reading order (shards.NewReader
// with a fixed seed and one row group per window, which starts at any row without reading
// the rows before it). EmbedRange embeds its rows in batches and writes one embedding file
// atomically, under its final name, so a retried range rewrites the same bytes. Commit
// writes embeddings.json last (embeddings.Commit); for a single .parquet output it
// first concatenates the parts into that file. RunEmbeds puts several such jobs with one
// checkpoint (a run's test, train and pair embeddings) into one pipeline.
//
// The encoder: one per process, checkpoint and backend (acquireEncoder), shared by every
// DoFn instance of every job in the process and by the plan, so the weights are read and
// the graph compiled once, and one GPU is fed by all the workers' ranges at once. Where the
// workers run in this process (prism, direct, LOOPBACK) it runs on the backend asked for
// (--backend: cpu, cuda or auto); workers elsewhere (Dataflow, a job server's own workers)
// run the CGO_ENABLED=0 worker binary, which has the CPU backend only.
//
// Rows are (id = the image's source index, label, embedding). With Views 2 each embedding is
// view 1's vector followed by view 2's, and the metadata says views=2: the input of npc.

// EmbedOptions is what an embedding run is asked to do: `dcl embed` fills it from its flags.
type EmbedOptions struct {
	Checkpoint string // a checkpoint file, or a training run's folder for its newest
	Data       string // a shard dataset directory (dcl preprocess)
	// Output is a directory (part files and embeddings.json) or a .parquet file.
	Output  string
	Feature trainstep.Feature // backbone (default) or projection
	// Views is 1 (view 1 of each row) or 2 (both views of pair shards, concatenated).
	Views int
	// Pass selects one augmented pass of the shards; -1 embeds every pass.
	Pass int
	// BatchSize is the number of images per encoder call (default 256).
	BatchSize int
	// Parts is the number of embedding files; 0 chooses about one per 16,384 rows.
	Parts int
	// Threads is the number of goroutines each worker's encoder uses (0: GOMAXPROCS).
	Threads int
	// Backend is the compute backend of the encoder (empty: auto) where the Beam workers run
	// in this process; remote workers always use the CPU (see ResolveEmbedBackend). Plugin
	// is the CUDA PJRT plugin (empty: search).
	Backend gpu.Kind
	Plugin  string
	// Precision is what CUDA embeds in (empty: float32): TF32 tensor cores where it allows
	// them (trainstep.Precision.AllowsTF32), full float32 otherwise. The CPU always computes
	// in float32; the embeddings' metadata says which arithmetic made them (embeddings.MetaArithmetic).
	Precision trainstep.Precision
	// LenientBackend makes cuda with remote workers mean cpu rather than an error (see
	// ResolveEmbedBackend).
	LenientBackend bool
	// Logger gets the one line saying which backend embeds, and why; nil: slog.Default().
	Logger *slog.Logger
	// CodeVersion is the program's version, recorded in the metadata beside the checkpoint.
	CodeVersion string
}

// EmbedJob is a planned embedding run.
type EmbedJob struct {
	Opts   EmbedOptions
	Ranges []embedRange
	Rows   int64
	Dim    int
	Meta   map[string]string
	// Backend is the backend the encoder runs on (cpu or cuda: auto resolved).
	Backend gpu.Kind
	// Images is the number of images the job sends through the encoder (Rows × Views).
	Images int64
	// Display shows the job's progress while it runs in this process (set it after
	// planning; see watch).
	Display  progress.Options
	progress *Progress
	// release lets go of the plan's hold on the shared encoder (Close).
	release func()
	tf32    bool // the encoder key's
}

// Close lets go of what the plan holds (the shared encoder). RunEmbed and RunEmbeds close
// the jobs they run; a job planned and never run must be closed by its planner.
func (job *EmbedJob) Close() {
	if job != nil && job.release != nil {
		job.release()
		job.release = nil
	}
}

// embedRange is one EmbedRange work item: rows [Start, Start+Count) of a pass's reading order.
type embedRange struct {
	Part, Parts int
	Pass        int
	Start       int64
	Count       int64
}

// rowsPerPart is the default size of an embedding file, in rows.
const rowsPerPart = 16384

// embedReadSeed fixes the reading order of the shards (see Embed).
const embedReadSeed = 0

// PlanEmbed checks the options against the shards' manifest and the checkpoint, and cuts the
// rows into ranges.
func PlanEmbed(ctx context.Context, o EmbedOptions) (*EmbedJob, error) {
	if o.Checkpoint == "" || o.Data == "" || o.Output == "" {
		return nil, errors.New("a checkpoint, a shard dataset and an output are all needed")
	}
	if o.Feature == "" {
		o.Feature = trainstep.Backbone
	}
	if _, err := trainstep.ParseFeature(string(o.Feature)); err != nil {
		return nil, err
	}
	if o.Views == 0 {
		o.Views = 1
	}
	switch {
	case o.Views != 1 && o.Views != 2:
		return nil, usage.Errorf("--views=%d: want 1 or 2", o.Views)
	case o.Pass < -1:
		return nil, usage.Errorf("--pass=%d: want a pass number, or -1 for all", o.Pass)
	case o.Parts < 0:
		return nil, usage.Errorf("--parts=%d: want at least 1, or 0 to choose", o.Parts)
	}
	m, err := shards.ReadManifest(ctx, o.Data)
	if err != nil {
		return nil, err
	}
	c := m.Config
	switch {
	case o.Views == 2 && c.Views != 2:
		return nil, fmt.Errorf("%s holds single views (preset %s): --views=2 needs view pairs", o.Data, c.Preset)
	case o.Pass >= c.Passes:
		return nil, fmt.Errorf("pass %d: %s has passes 0 to %d (or -1 for all)", o.Pass, o.Data, c.Passes-1)
	}
	if err := o.Precision.Validate(); err != nil {
		return nil, usage.Errorf("--precision: %v", err)
	}
	kind, err := ResolveEmbedBackend(o.Backend, o.LenientBackend, o.Logger)
	if err != nil {
		return nil, err
	}
	// Load the checkpoint here, where an error reaches the user at once. In this process the
	// loaded encoder is the one the workers use (held until the job is closed); for remote
	// workers it is only a check.
	resolved, err := trainstep.ResolveCheckpoint(ctx, o.Checkpoint)
	if err != nil {
		return nil, err
	}
	key := encoderKey{Checkpoint: resolved, Kind: kind, Plugin: o.Plugin, Threads: o.Threads, TF32: kind != gpu.CPU && o.Precision.AllowsTF32()}
	if !workersHere() {
		key.Threads = 1
	}
	enc, release, err := acquireEncoder(ctx, key, o.Logger)
	if err != nil {
		return nil, err
	}
	kind = encoderKind(key)
	if !workersHere() {
		defer release()
		release = nil
	}
	info := enc.Info()
	if err := checkImageSize(info, c); err != nil {
		if release != nil {
			release()
		}
		return nil, fmt.Errorf("checkpoint %s and shards %s: %w", info.Checkpoint, o.Data, err)
	}
	o.Checkpoint = info.Checkpoint // the resolved file, so every worker loads the same one
	o.Backend = key.Kind           // as asked: the workers here find the plan's encoder by it
	if o.BatchSize <= 0 {
		o.BatchSize = trainstep.EncoderOptionsFor(kind, c.Height, c.Width).MaxBatch
	}
	dim := info.FeatureDim
	if o.Feature == trainstep.Projection {
		dim = info.ProjectionDim
	}
	dim *= o.Views

	passes := []int{o.Pass}
	if o.Pass == -1 {
		passes = nil
		for p := range c.Passes {
			passes = append(passes, p)
		}
	}
	var total int64
	passRows := map[int]int64{}
	for _, p := range passes {
		for _, s := range m.ShardsOfPass(p) {
			passRows[p] += s.Rows
		}
		total += passRows[p]
	}
	parts := o.Parts
	if parts == 0 {
		parts = int(max(1, min(9999, (total+rowsPerPart-1)/rowsPerPart)))
	}
	job := &EmbedJob{Opts: o, Rows: total, Dim: dim, Backend: kind, Images: total * int64(o.Views), release: release, tf32: key.TF32, Meta: map[string]string{
		embeddings.MetaDataset: c.Dataset, embeddings.MetaSplit: c.Split, embeddings.MetaFeature: string(o.Feature), embeddings.MetaViews: strconv.Itoa(o.Views),
		embeddings.MetaCheckpoint: rawname.Text(info.Checkpoint), embeddings.MetaTemperature: strconv.FormatFloat(info.Loss.Temperature, 'g', -1, 64),
		"preset": c.Preset, "passes": passList(passes), embeddings.MetaBackend: string(kind),
		embeddings.MetaArithmetic: verify.EncoderArithmetic(kind == gpu.CUDA, o.Precision).Name,
	}}
	if o.CodeVersion != "" {
		job.Meta[embeddings.MetaCodeVersion] = o.CodeVersion
	}
	if len(c.Classes) > 0 {
		job.Meta[embeddings.ClassesKey] = embeddings.ClassesMeta(c.Classes)
	}
	// Cut every pass into ranges of whole encoder batches; parts share the rows evenly.
	per := max(1, (total+int64(parts)-1)/int64(parts))
	per = (per + int64(o.BatchSize) - 1) / int64(o.BatchSize) * int64(o.BatchSize)
	for _, p := range passes {
		for start := int64(0); start < passRows[p]; start += per {
			job.Ranges = append(job.Ranges, embedRange{Pass: p, Start: start, Count: min(per, passRows[p]-start)})
		}
	}
	for i := range job.Ranges {
		job.Ranges[i].Part, job.Ranges[i].Parts = i, len(job.Ranges)
	}
	if len(job.Ranges) == 0 {
		job.Close()
		return nil, fmt.Errorf("%s has no rows to embed", o.Data)
	}
	return job, nil
}

// ResolveEmbedBackend says which backend embeds when asked for kind (empty: auto). Where the
// Beam workers run in this process (prism, direct, LOOPBACK) it is kind itself (auto is
// resolved when the encoder loads). Workers elsewhere run the CGO_ENABLED=0 worker binary,
// which has only the CPU backend: there auto means cpu, said on log, and cuda is a usage
// error unless lenient (reproduce, whose runs' backend is the trainer's: a run trains on the
// GPU here and is embedded by the remote workers on their CPUs, also said on log). A GPU
// worker image is the way to embed on remote GPUs (docs/evaluation.md).
func ResolveEmbedBackend(kind gpu.Kind, lenient bool, log *slog.Logger) (gpu.Kind, error) {
	if kind == "" {
		kind = gpu.Auto
	}
	if _, err := gpu.ParseKind(string(kind)); err != nil {
		return "", usage.Errorf("--backend: %v", err)
	}
	if workersHere() || kind == gpu.CPU {
		return kind, nil
	}
	if kind.IsXLA() && !lenient {
		return "", usage.Errorf("--backend=%s: the Beam workers of --runner=%s run elsewhere, on the CGO_ENABLED=0 worker binary, which has only the CPU backend; run the workers in this process (prism, direct, or --environment_type=LOOPBACK), or give --backend=cpu", kind, RunnerName())
	}
	if log == nil {
		log = slog.Default()
	}
	log.Info("compute backend of the embedding workers", "backend", gpu.CPU, "asked", kind,
		"reason", "the Beam workers of --runner="+RunnerName()+" run elsewhere, on the CPU-only worker binary")
	return gpu.CPU, nil
}

func passList(passes []int) string {
	s := make([]string, len(passes))
	for i, p := range passes {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ",")
}

// checkImageSize reports shards whose images the encoder cannot take.
func checkImageSize(info trainstep.EncoderInfo, c shards.Config) error {
	model, err := trainstep.NewModel(info.Model)
	if err != nil {
		return err
	}
	return model.CheckImageSize(c.Height, c.Width, c.Channels)
}

// The elements between the steps are Go structs, registered with registerElement.
func init() {
	registerElement[embedRange]()
	registerElement[embeddings.FileInfo]()
	registerElement[embeddings.Manifest]()
	register.DoFn3x1[context.Context, embedRange, func(embeddings.FileInfo), error](&embedRangeFn{})
	register.DoFn4x1[context.Context, []byte, func(*embeddings.FileInfo) bool, func(embeddings.Manifest), error](&commitEmbeddingsFn{})
	register.Emitter1[embeddings.FileInfo]()
	register.Emitter1[embeddings.Manifest]()
	register.Iter1[embeddings.FileInfo]()
}

var (
	embedRows  = beam.NewCounter(EvalMetricsNamespace, "embed_rows")
	embedFiles = beam.NewCounter(EvalMetricsNamespace, "embed_files")
)

// Embed adds the embedding pipeline of job to s. It writes job.Opts.Output and outputs one
// element, the committed embeddings.Manifest.
func Embed(s beam.Scope, job *EmbedJob) beam.PCollection {
	s = s.Scope("Embed")
	o := job.Opts
	infos := beam.ParDo(s.Scope("EmbedRange"), &embedRangeFn{
		Checkpoint: o.Checkpoint, Data: o.Data, PartsDir: partsDir(o.Output), Feature: string(o.Feature),
		Views: o.Views, BatchSize: o.BatchSize, Dim: job.Dim, Meta: job.Meta, Threads: o.Threads, ProgressID: job.progress.id(),
		Backend: string(o.Backend), Plugin: o.Plugin, TF32: job.tf32,
	}, beam.Reshuffle(s, beam.CreateList(s, job.Ranges)))
	return beam.ParDo(s.Scope("Commit"), &commitEmbeddingsFn{
		Output: o.Output, Dim: job.Dim, Meta: job.Meta, Parts: len(job.Ranges), Rows: job.Rows,
	}, beam.Impulse(s), beam.SideInput{Input: infos})
}

// partsDir is where the part files go: the output directory itself, or a folder beside a
// single-file output that Commit removes once it has concatenated them.
func partsDir(output string) string {
	if strings.HasSuffix(output, ".parquet") {
		// Hidden, as a staging folder is: no glob takes the parts for data beside the file.
		dir, base := path.Split(strings.TrimSuffix(output, ".parquet"))
		return dir + "." + base + ".parts"
	}
	return output
}

// embedRangeFn embeds one range of rows into one embedding file.
type embedRangeFn struct {
	Checkpoint string
	Data       string
	PartsDir   string
	Feature    string
	Views      int
	BatchSize  int
	Dim        int
	Meta       map[string]string
	Threads    int
	ProgressID string
	// Backend is the backend as the plan asked for it (cpu for remote workers; cpu, cuda or
	// auto in this process, where it finds the plan's encoder by it).
	Backend string
	Plugin  string
	// TF32 is the encoder key's: the plan's encoder allows TF32 tensor cores.
	TF32 bool

	enc      *trainstep.Encoder
	release  func()
	progress *Progress
}

// Setup takes the process's encoder for the checkpoint: the plan's, where it runs in this
// process; otherwise loaded, once per worker process.
// embedWaiting is what the embed stage's progress says until its first batch is embedded:
// the encoder is read from its checkpoint and its graph compiled first (with XLA, most of a
// minute), when no row is counted yet.
const embedWaiting = "reading the checkpoint and compiling the encoder before the first batch (with XLA: up to a minute)"

func (f *embedRangeFn) Setup(ctx context.Context) error {
	f.progress = lookupProgress(f.ProgressID)
	enc, release, err := borrowEncoder(ctx, encoderKey{Checkpoint: f.Checkpoint, Kind: gpu.Kind(f.Backend), Plugin: f.Plugin, Threads: f.Threads, TF32: f.TF32}, discardLogger())
	if err != nil {
		return err
	}
	f.enc, f.release = enc, release
	return nil
}

// Teardown lets go of the encoder (the last user closes it), where the runner calls it.
func (f *embedRangeFn) Teardown() {
	if f.release != nil {
		f.release()
		f.release = nil
	}
}

func (f *embedRangeFn) ProcessElement(ctx context.Context, r embedRange, emit func(embeddings.FileInfo)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops the reader's read-ahead
	reader, err := shards.NewReader(ctx, f.Data, shards.ReaderOptions{
		BatchSize: f.BatchSize, Seed: embedReadSeed, Epoch: r.Pass, Start: r.Start, Window: 1, KeepPartial: true,
	})
	if err != nil {
		return err
	}
	defer reader.Close()
	path := embeddings.PartPath(f.PartsDir, r.Part, r.Parts)
	w, err := embeddings.NewWriter(ctx, path, f.Dim, f.Meta)
	if err != nil {
		return err
	}
	defer w.Abort() // nothing appears under the file's name unless Close commits it
	feature := trainstep.Feature(f.Feature)
	var done int64
	for done < r.Count {
		b, err := reader.Next()
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("%s pass %d ended at row %d, before the range's end %d", f.Data, r.Pass, r.Start+done, r.Start+r.Count)
		}
		if err != nil {
			return err
		}
		n := int(min(int64(b.Len), r.Count-done))
		vecs, err := f.embedBatch(b, n, feature)
		if err != nil {
			return fmt.Errorf("%s pass %d rows %d to %d: %w", f.Data, r.Pass, r.Start+done, r.Start+done+int64(n)-1, err)
		}
		for i := range n {
			if err := w.WriteKey(b.Indices[i], b.Keys[i], b.Labels[i], vecs[i]); err != nil {
				return err
			}
		}
		done += int64(n)
		embedRows.Inc(ctx, int64(n))
		f.progress.addDone(int64(n))
		reader.Release(b)
	}
	info, err := w.Close()
	if err != nil {
		return err
	}
	embedFiles.Inc(ctx, 1)
	emit(info)
	return nil
}

// embedBatch embeds the first n rows of b: view 1, or view 1 then view 2 concatenated.
func (f *embedRangeFn) embedBatch(b *shards.Batch, n int, feature trainstep.Feature) ([][]float32, error) {
	images := make([]transforms.Image, n)
	for i := range n {
		images[i] = b.Image(1, i)
	}
	out, err := f.enc.Embed(images, feature)
	if err != nil || f.Views == 1 {
		return out, err
	}
	for i := range n {
		images[i] = b.Image(2, i)
	}
	second, err := f.enc.Embed(images, feature)
	if err != nil {
		return nil, err
	}
	for i := range out {
		out[i] = append(out[i], second[i]...)
	}
	return out, nil
}

// commitEmbeddingsFn writes embeddings.json (or the single output file) once every range
// has its file.
type commitEmbeddingsFn struct {
	Output string
	Dim    int
	Meta   map[string]string
	Parts  int
	Rows   int64
}

func (f *commitEmbeddingsFn) ProcessElement(ctx context.Context, _ []byte, infos func(*embeddings.FileInfo) bool, emit func(embeddings.Manifest)) error {
	byPath := map[string]embeddings.FileInfo{}
	var info embeddings.FileInfo
	for infos(&info) {
		byPath[info.Path] = info // a retried range reports the same file again
	}
	var files []embeddings.FileInfo
	var rows int64
	for p := range f.Parts {
		info, ok := byPath[embeddings.FileName(p, f.Parts)]
		if !ok {
			return fmt.Errorf("embedding file %s was not written", embeddings.FileName(p, f.Parts))
		}
		files = append(files, info)
		rows += info.Rows
	}
	if rows != f.Rows {
		return fmt.Errorf("the embedding files hold %d rows, the shards %d", rows, f.Rows)
	}
	dir := partsDir(f.Output)
	if dir == f.Output {
		m, err := embeddings.Commit(ctx, dir, f.Dim, files, f.Meta)
		if err != nil {
			return err
		}
		emit(*m)
		return nil
	}
	// A single file: its parts are never committed (given names that end in .parquet),
	// since a kill before the file is whole would leave them for any glob to read as data.
	if err := concatEmbeddings(ctx, dir, f.Output, f.Dim, f.Meta, files); err != nil {
		return err
	}
	emit(embeddings.Manifest{Format: shards.FormatVersion, Dim: f.Dim, Rows: rows, Files: files, Meta: f.Meta})
	return nil
}

// concatEmbeddings writes the rows of the staged parts files (embeddings.PartPath under dir,
// each checked against what its writer reported) into the single file out, then removes
// dir.
func concatEmbeddings(ctx context.Context, dir, out string, dim int, meta map[string]string, files []embeddings.FileInfo) error {
	w, err := embeddings.NewWriter(ctx, out, dim, meta)
	if err != nil {
		return err
	}
	defer w.Abort()
	for part, info := range files {
		p := embeddings.PartPath(dir, part, len(files))
		if err := embeddings.CheckFile(ctx, p, info); err != nil {
			return err
		}
		r, err := embeddings.Open(ctx, p, 0)
		if err != nil {
			return err
		}
		for b, err := range r.Blocks() {
			if err != nil {
				r.Close()
				return err
			}
			for i := range b.Len() {
				if err := w.WriteKey(b.IDs[i], b.Keys[i], b.Labels[i], b.Vector(i)); err != nil {
					r.Close()
					return err
				}
			}
		}
		r.Close()
	}
	if _, err := w.Close(); err != nil {
		return err
	}
	return storage.RemoveTree(ctx, dir)
}

// EmbedResult is what a finished embedding run reports.
type EmbedResult struct {
	Output string `json:"output"`
	Rows   int64  `json:"rows"`
	Dim    int    `json:"dim"`
	Files  int    `json:"files"`
	// Images went through the encoder (rows × views), on Backend (cpu or cuda).
	Images  int64  `json:"images"`
	Backend string `json:"backend"`
	Wall    string `json:"wall"`
}

// RunEmbed builds the embedding pipeline and runs it on the runner the Beam flags select,
// then checks the output. It closes the job.
func RunEmbed(ctx context.Context, job *EmbedJob) (*EmbedResult, error) {
	res, err := RunEmbeds(ctx, job)
	if err != nil || res == nil {
		return nil, err
	}
	return res[0], nil
}

// RunEmbeds runs several embedding jobs as one pipeline (one launch, and in this process one
// encoder per checkpoint for all of them), then checks each output. It closes the jobs. The
// results are nil, with no error, when the pipeline was only translated or submitted.
func RunEmbeds(ctx context.Context, jobs ...*EmbedJob) ([]*EmbedResult, error) {
	defer func() {
		for _, job := range jobs {
			job.Close()
		}
	}()
	if len(jobs) == 0 {
		return nil, nil
	}
	start := time.Now()
	var rows int64
	for _, job := range jobs {
		rows += job.Rows
	}
	p, s := beam.NewPipelineWithRoot()
	prog, end := watch(jobs[0].Display, "embed", rows, "rows", embedWaiting)
	for _, job := range jobs {
		job.progress = prog
		Embed(s, job)
	}
	_, err := runPipeline(ctx, "embed", p)
	end(err == nil)
	if err != nil {
		return nil, err
	}
	if submitOnly() {
		return nil, nil // translated (--dry_run) or submitted (--async): nothing to read yet
	}
	wall := time.Since(start).Round(time.Millisecond).String()
	var out []*EmbedResult
	for _, job := range jobs {
		r, err := embeddings.Open(ctx, job.Opts.Output, 1)
		if err != nil {
			return nil, fmt.Errorf("the pipeline finished but its output is not readable: %w", err)
		}
		got := &EmbedResult{Output: job.Opts.Output, Rows: r.Rows(), Dim: r.Dim(), Files: len(r.Files()), Images: job.Images, Backend: string(job.Backend), Wall: wall}
		r.Close()
		if got.Rows != job.Rows || got.Dim != job.Dim {
			return nil, fmt.Errorf("%s holds %d rows of %d values, want %d of %d", job.Opts.Output, got.Rows, got.Dim, job.Rows, job.Dim)
		}
		out = append(out, got)
	}
	return out, nil
}
