package pipelines

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/gomlx/compute"

	"github.com/dcl-beam/dcl-beam/gpu"
	"github.com/dcl-beam/dcl-beam/internal/progress"
	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/internal/usage"
	"github.com/dcl-beam/dcl-beam/shards"
	"github.com/dcl-beam/dcl-beam/trainstep"
	"github.com/dcl-beam/dcl-beam/transforms"
)

// The embed pipeline (Embed) runs a trained encoder over a shard dataset and writes the
// embeddings:
//
//	Create(ranges) ─ Reshuffle ─ EmbedRange ─ file infos ─(side input)─ Impulse ─ Commit
//
// Each range is a run of rows of one pass in the shards' reading order (shards.NewReader
// with a fixed seed and one row group per window, which starts at any row without reading
// the rows before it). EmbedRange loads the checkpoint once per DoFn instance (in Setup,
// on the pure-Go CPU backend, as a worker binary has no cgo), embeds its rows in batches and
// writes one embedding file atomically, under its final name, so a retried range rewrites
// the same bytes. Commit writes embeddings.json last (shards.CommitEmbeddings); for a single
// .parquet output it first concatenates the parts into that file.
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
}

// EmbedJob is a planned embedding run.
type EmbedJob struct {
	Opts   EmbedOptions
	Ranges []embedRange
	Rows   int64
	Dim    int
	Meta   map[string]string
	// Display shows the job's progress while it runs in this process (set it after
	// planning; see watch).
	Display  progress.Options
	progress *Progress
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
	if o.BatchSize <= 0 {
		o.BatchSize = trainstep.EncoderMaxBatch
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
	// Check the checkpoint here, where the error reaches the user at once.
	backend, err := gpu.New(ctx, gpu.Options{Kind: gpu.CPU, Threads: 1, Logger: discardLogger()})
	if err != nil {
		return nil, err
	}
	defer backend.Finalize()
	enc, err := trainstep.LoadEncoder(ctx, backend, o.Checkpoint)
	if err != nil {
		return nil, err
	}
	info := enc.Info()
	enc.Close()
	if err := checkImageSize(info, c); err != nil {
		return nil, fmt.Errorf("checkpoint %s and shards %s: %w", info.Checkpoint, o.Data, err)
	}
	o.Checkpoint = info.Checkpoint // the resolved file, so every worker loads the same one
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
	job := &EmbedJob{Opts: o, Rows: total, Dim: dim, Meta: map[string]string{
		MetaDataset: c.Dataset, MetaSplit: c.Split, MetaFeature: string(o.Feature), MetaViews: strconv.Itoa(o.Views),
		MetaCheckpoint: info.Checkpoint, MetaTemperature: strconv.FormatFloat(info.Loss.Temperature, 'g', -1, 64),
		"preset": c.Preset, "passes": passList(passes),
	}}
	if len(c.Classes) > 0 {
		job.Meta[shards.EmbeddingClassesKey] = shards.ClassesMeta(c.Classes)
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
		return nil, fmt.Errorf("%s has no rows to embed", o.Data)
	}
	return job, nil
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

func init() {
	register.DoFn3x1[context.Context, string, func(string), error](&embedRangeFn{})
	register.DoFn4x1[context.Context, []byte, func(*string) bool, func(string), error](&commitEmbeddingsFn{})
}

var (
	embedRows  = beam.NewCounter(EvalMetricsNamespace, "embed_rows")
	embedFiles = beam.NewCounter(EvalMetricsNamespace, "embed_files")
)

// Embed adds the embedding pipeline of job to s. It writes job.Opts.Output and outputs one
// element, the embeddings manifest as JSON.
func Embed(s beam.Scope, job *EmbedJob) (beam.PCollection, error) {
	s = s.Scope("Embed")
	tasks := make([]string, len(job.Ranges))
	for i, r := range job.Ranges {
		b, err := json.Marshal(r)
		if err != nil {
			return beam.PCollection{}, err
		}
		tasks[i] = string(b)
	}
	o := job.Opts
	infos := beam.ParDo(s.Scope("EmbedRange"), &embedRangeFn{
		Checkpoint: o.Checkpoint, Data: o.Data, PartsDir: partsDir(o.Output), Feature: string(o.Feature),
		Views: o.Views, BatchSize: o.BatchSize, Dim: job.Dim, Meta: job.Meta, Threads: o.Threads, ProgressID: job.progress.id(),
	}, beam.Reshuffle(s, beam.CreateList(s, tasks)))
	manifest := beam.ParDo(s.Scope("Commit"), &commitEmbeddingsFn{
		Output: o.Output, Dim: job.Dim, Meta: job.Meta, Parts: len(job.Ranges), Rows: job.Rows,
	}, beam.Impulse(s), beam.SideInput{Input: infos})
	return manifest, nil
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

	backend  compute.Backend
	enc      *trainstep.Encoder
	progress *Progress
}

// Setup loads the encoder once for this DoFn instance, not once per element.
func (f *embedRangeFn) Setup(ctx context.Context) error {
	f.progress = lookupProgress(f.ProgressID)
	be, err := gpu.New(ctx, gpu.Options{Kind: gpu.CPU, Threads: f.Threads, Logger: discardLogger()})
	if err != nil {
		return err
	}
	enc, err := trainstep.LoadEncoder(ctx, be, f.Checkpoint)
	if err != nil {
		be.Finalize()
		return err
	}
	f.backend, f.enc = be, enc
	return nil
}

// Teardown releases the encoder and the backend.
func (f *embedRangeFn) Teardown() {
	if f.enc != nil {
		f.enc.Close()
	}
	if f.backend != nil {
		f.backend.Finalize()
	}
}

func (f *embedRangeFn) ProcessElement(ctx context.Context, task string, emit func(string)) error {
	var r embedRange
	if err := json.Unmarshal([]byte(task), &r); err != nil {
		return fmt.Errorf("decoding an embedding range: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops the reader's read-ahead
	reader, err := shards.NewReader(ctx, f.Data, shards.ReaderOptions{
		BatchSize: f.BatchSize, Seed: embedReadSeed, Epoch: r.Pass, Start: r.Start, Window: 1, KeepPartial: true,
	})
	if err != nil {
		return err
	}
	defer reader.Close()
	path := shards.EmbeddingPartPath(f.PartsDir, r.Part, r.Parts)
	w, err := shards.NewEmbeddingWriter(ctx, path, f.Dim, f.Meta)
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
			if err := w.Write(b.Indices[i], b.Labels[i], vecs[i]); err != nil {
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
	js, err := json.Marshal(info)
	if err != nil {
		return err
	}
	emit(string(js))
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

func (f *commitEmbeddingsFn) ProcessElement(ctx context.Context, _ []byte, infos func(*string) bool, emit func(string)) error {
	byPath := map[string]shards.EmbeddingFileInfo{}
	var js string
	for infos(&js) {
		var info shards.EmbeddingFileInfo
		if err := json.Unmarshal([]byte(js), &info); err != nil {
			return fmt.Errorf("decoding an embedding file's info: %w", err)
		}
		byPath[info.Path] = info // a retried range reports the same file again
	}
	var files []shards.EmbeddingFileInfo
	var rows int64
	for p := range f.Parts {
		info, ok := byPath[shards.EmbeddingFileName(p, f.Parts)]
		if !ok {
			return fmt.Errorf("embedding file %s was not written", shards.EmbeddingFileName(p, f.Parts))
		}
		files = append(files, info)
		rows += info.Rows
	}
	if rows != f.Rows {
		return fmt.Errorf("the embedding files hold %d rows, the shards %d", rows, f.Rows)
	}
	dir := partsDir(f.Output)
	m, err := shards.CommitEmbeddings(ctx, dir, f.Dim, files, f.Meta)
	if err != nil {
		return err
	}
	if dir != f.Output {
		if err := concatEmbeddings(ctx, dir, f.Output, f.Dim, f.Meta); err != nil {
			return err
		}
	}
	out, err := json.Marshal(m)
	if err != nil {
		return err
	}
	emit(string(out))
	return nil
}

// concatEmbeddings writes the rows of the embeddings directory dir into the single file
// out, then removes dir.
func concatEmbeddings(ctx context.Context, dir, out string, dim int, meta map[string]string) error {
	r, err := shards.OpenEmbeddings(ctx, dir, 0)
	if err != nil {
		return err
	}
	defer r.Close()
	w, err := shards.NewEmbeddingWriter(ctx, out, dim, meta)
	if err != nil {
		return err
	}
	defer w.Abort()
	for {
		b, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		for i := range b.Len() {
			if err := w.Write(b.IDs[i], b.Labels[i], b.Vector(i)); err != nil {
				return err
			}
		}
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
	Wall   string `json:"wall"`
}

// RunEmbed builds the embedding pipeline and runs it on the runner the Beam flags select,
// then checks the output.
func RunEmbed(ctx context.Context, job *EmbedJob) (*EmbedResult, error) {
	start := time.Now()
	var end func(bool)
	job.progress, end = watch(job.Display, "embed", job.Rows, "rows")
	p, s := beam.NewPipelineWithRoot()
	if _, err := Embed(s, job); err != nil {
		end(false)
		return nil, err
	}
	_, err := runPipeline(ctx, "embed", p)
	end(err == nil)
	if err != nil {
		return nil, err
	}
	if submitOnly() {
		return nil, nil // translated (--dry_run) or submitted (--async): nothing to read yet
	}
	r, err := shards.OpenEmbeddings(ctx, job.Opts.Output, 1)
	if err != nil {
		return nil, fmt.Errorf("the pipeline finished but its output is not readable: %w", err)
	}
	defer r.Close()
	if r.Rows() != job.Rows || r.Dim() != job.Dim {
		return nil, fmt.Errorf("%s holds %d rows of %d values, want %d of %d", job.Opts.Output, r.Rows(), r.Dim(), job.Rows, job.Dim)
	}
	return &EmbedResult{Output: job.Opts.Output, Rows: r.Rows(), Dim: r.Dim(), Files: len(r.Files()), Wall: time.Since(start).Round(time.Millisecond).String()}, nil
}
