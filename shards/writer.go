package shards

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/parquet-go/parquet-go"

	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/transforms"
)

// Defaults of WriterOptions.
const (
	// DefaultRowGroupBytes bounds the view bytes of a row group, and so a writer's memory
	// (parquet-go keeps a row group's pages in memory until it is flushed) and the unit the
	// trainer's reader shuffles and reads at once.
	DefaultRowGroupBytes = 4 << 20
	// DefaultBatchBytes is how many view bytes a writer collects before handing them to
	// parquet-go in one Write call; pages are cut only between Write calls.
	DefaultBatchBytes = 1 << 20
)

// WriterOptions tune a Writer. The zero value means the defaults. They decide where row
// groups are cut, so runs that must give identical bytes must use identical options.
type WriterOptions struct {
	RowGroupBytes int
	BatchBytes    int
}

// ShardInfo describes one committed shard: the manifest's entry for it. A Writer computes it
// while writing, so committing a dataset never re-reads a shard.
type ShardInfo struct {
	Path   string `json:"path"` // relative to the dataset directory, slash-separated
	Pass   int    `json:"pass"`
	Part   int    `json:"part"`
	Rows   int64  `json:"rows"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
	// Labels counts rows per label (Unlabelled included).
	Labels map[int32]int64 `json:"labels"`
	// RowGroups holds the row count of every row group, in file order: the trainer's reader
	// plans its shuffled order from the manifest alone.
	RowGroups []int64 `json:"row_groups"`
}

// Writer writes one shard atomically: rows go to a temporary file (or an uncommitted GCS
// upload), and the shard appears under its final name only when Close succeeds. An error,
// Abort or a cancelled context leaves nothing under the final name.
//
// A Writer is not safe for concurrent use. Rows are stored in the order written: callers
// that want byte-identical shards on a re-run write them in a deterministic order.
type Writer struct {
	ctx  context.Context
	id   ShardID
	cfg  Config
	opts WriterOptions
	out  *ParquetFile[Row] // holds the sticky error: the first failure aborts the shard

	batch      []Row
	batchBytes int
	groupBytes int
	groupRows  int64

	rows      int64
	labels    map[int32]int64
	rowGroups []int64
}

// NewWriter starts shard id of the dataset in dir (local path or gs://). cfg is the run's
// configuration; it goes into the shard's footer and every row is checked against it.
func NewWriter(ctx context.Context, dir string, id ShardID, cfg Config, opts WriterOptions) (*Writer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := id.validate(&cfg); err != nil {
		return nil, err
	}
	if opts.RowGroupBytes <= 0 {
		opts.RowGroupBytes = DefaultRowGroupBytes
	}
	if opts.BatchBytes <= 0 {
		opts.BatchBytes = DefaultBatchBytes
	}
	meta, err := footerMetadata(id, cfg)
	if err != nil {
		return nil, err
	}
	// Shards are written under the staging folder; Commit moves them into place.
	p := storage.Join(dir, StagedPath(id.Path()))
	options := []parquet.WriterOption{
		// A fixed CreatedBy: the default embeds the build's module hash, which would make
		// the bytes depend on how the binary was built rather than on the data.
		parquet.CreatedBy("dcl-beam", strconv.Itoa(FormatVersion), ""),
	}
	for _, c := range viewColumns {
		options = append(options, parquet.SkipPageStatistics(c), parquet.SkipPageBounds(c))
	}
	for _, kv := range meta {
		options = append(options, parquet.KeyValueMetadata(kv[0], kv[1]))
	}
	return &Writer{
		ctx: ctx, id: id, cfg: cfg, opts: opts,
		out:    NewParquetFile[Row](ctx, p, id.Path(), "shard "+id.Path(), options...),
		labels: map[int32]int64{},
	}, nil
}

func footerMetadata(id ShardID, cfg Config) ([][2]string, error) {
	js, err := cfg.canonical()
	if err != nil {
		return nil, err
	}
	return [][2]string{
		{FormatKey, strconv.Itoa(FormatVersion)},
		{ConfigKey, string(js)},
		{PassKey, strconv.Itoa(id.Pass)},
		{PartKey, strconv.Itoa(id.Part)},
		{DatasetKey, cfg.Dataset},
		{SplitKey, cfg.Split},
		{PresetKey, cfg.Preset},
		{SeedKey, strconv.FormatUint(cfg.Seed, 10)},
		{SourceChecksumKey, cfg.SourceChecksum},
		{CodeVersionKey, cfg.CodeVersion},
		{AugmentKey, string(compactJSON(cfg.Augment))},
	}, nil
}

func compactJSON(b json.RawMessage) []byte {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return b
	}
	return buf.Bytes()
}

// Path returns the shard's path relative to the dataset directory.
func (w *Writer) Path() string { return w.id.Path() }

// WriteViews encodes the views in the dataset's encoding and writes one row. view2 is
// ignored for single-view (evaluation) datasets.
func (w *Writer) WriteViews(key string, index int64, label int32, view1, view2 transforms.Image) error {
	if err := w.out.Err(); err != nil {
		return err
	}
	r := Row{Key: key, Index: index, Label: label, Pass: int32(w.id.Pass),
		Height: int32(view1.H), Width: int32(view1.W), Channels: int32(view1.C), Encoding: string(w.cfg.Encoding)}
	var err error
	if r.View1, err = EncodeView(view1, w.cfg.Encoding); err != nil {
		return w.out.Fail(fmt.Errorf("row %q view 1: %w", key, err))
	}
	if w.cfg.Views == 2 {
		if view2.H != view1.H || view2.W != view1.W || view2.C != view1.C {
			return w.out.Fail(fmt.Errorf("row %q: views differ in size (%dx%dx%d, %dx%dx%d)", key, view1.H, view1.W, view1.C, view2.H, view2.W, view2.C))
		}
		if r.View2, err = EncodeView(view2, w.cfg.Encoding); err != nil {
			return w.out.Fail(fmt.Errorf("row %q view 2: %w", key, err))
		}
	}
	return w.Write(r)
}

// Write adds a row whose views are already encoded. The Writer keeps r's byte slices until
// it has written them: do not change them after the call.
func (w *Writer) Write(r Row) error {
	if err := w.out.Err(); err != nil {
		return err
	}
	if err := w.ctx.Err(); err != nil {
		return w.out.Fail(err)
	}
	if err := w.check(&r); err != nil {
		return w.out.Fail(err)
	}
	w.batch = append(w.batch, r)
	w.batchBytes += len(r.View1) + len(r.View2)
	w.rows++
	w.labels[r.Label]++
	// A row group of GroupRows rows ends exactly there: its last batch is cut short.
	if w.batchBytes >= w.opts.BatchBytes || (w.cfg.GroupRows > 0 && w.groupRows+int64(len(w.batch)) == int64(w.cfg.GroupRows)) {
		return w.flushBatch()
	}
	return nil
}

func (w *Writer) check(r *Row) error {
	c := &w.cfg
	switch {
	case r.Key == "":
		return fmt.Errorf("row with source index %d has no key", r.Index)
	case r.Label < Unlabelled:
		return fmt.Errorf("row %q: label %d (want -1 for unlabelled, or at least 0)", r.Key, r.Label)
	case int(r.Pass) != w.id.Pass:
		return fmt.Errorf("row %q: pass %d written to a shard of pass %d", r.Key, r.Pass, w.id.Pass)
	}
	return c.checkRow(r)
}

// checkRow checks a row's sizes, encoding and views against the dataset's configuration.
// A base row (Online) holds one image of any size in View1.
func (c *Config) checkRow(r *Row) error {
	views := c.Views
	if c.Online {
		views = 1
	}
	switch {
	case c.Online && (r.Height <= 0 || r.Width <= 0 || int(r.Channels) != c.Channels):
		return fmt.Errorf("row %q: base image %dx%dx%d, want a positive size with %d channels", r.Key, r.Height, r.Width, r.Channels, c.Channels)
	case !c.Online && (int(r.Height) != c.Height || int(r.Width) != c.Width || int(r.Channels) != c.Channels):
		return fmt.Errorf("row %q: views are %dx%dx%d, the dataset's are %dx%dx%d", r.Key, r.Height, r.Width, r.Channels, c.Height, c.Width, c.Channels)
	case c.Online && !validEncoding(r.Encoding):
		return fmt.Errorf("row %q: encoding %q: want raw, png or jpeg", r.Key, r.Encoding)
	case !c.Online && r.Encoding != string(c.Encoding):
		return fmt.Errorf("row %q: encoding %q, the dataset's is %q", r.Key, r.Encoding, c.Encoding)
	case len(r.View1) == 0:
		return fmt.Errorf("row %q: view 1 is empty", r.Key)
	case views == 2 && len(r.View2) == 0:
		return fmt.Errorf("row %q: view 2 is empty in a dataset of view pairs", r.Key)
	case views == 1 && len(r.View2) != 0:
		return fmt.Errorf("row %q: view 2 is set in a dataset of one image per row", r.Key)
	case Encoding(r.Encoding) == Raw && (len(r.View1) != int(r.Height)*int(r.Width)*int(r.Channels) || (views == 2 && len(r.View2) != len(r.View1))):
		return fmt.Errorf("row %q: raw views of %d and %d bytes, want %d", r.Key, len(r.View1), len(r.View2), int(r.Height)*int(r.Width)*int(r.Channels))
	}
	return nil
}

func validEncoding(e string) bool {
	_, err := ParseEncoding(e)
	return err == nil
}

func (w *Writer) flushBatch() error {
	if len(w.batch) == 0 {
		return nil
	}
	if err := w.out.Write(w.batch); err != nil {
		return err
	}
	w.groupRows += int64(len(w.batch))
	w.groupBytes += w.batchBytes
	clear(w.batch) // drop the references to the image bytes
	w.batch, w.batchBytes = w.batch[:0], 0
	full := w.groupBytes >= w.opts.RowGroupBytes
	if n := w.cfg.GroupRows; n > 0 {
		full = w.groupRows >= int64(n)
	}
	if full {
		if err := w.out.Flush(); err != nil {
			return err
		}
		w.rowGroups = append(w.rowGroups, w.groupRows)
		w.groupRows, w.groupBytes = 0, 0
	}
	return nil
}

// Close writes the footer and commits the shard under its final name, returning its
// manifest entry. After an error nothing is committed.
func (w *Writer) Close() (ShardInfo, error) {
	if err := w.out.Err(); err != nil {
		return ShardInfo{}, err
	}
	if err := w.flushBatch(); err != nil {
		return ShardInfo{}, err
	}
	if w.groupRows > 0 {
		w.rowGroups = append(w.rowGroups, w.groupRows)
	}
	size, sum, err := w.out.Commit()
	if err != nil {
		return ShardInfo{}, err
	}
	return ShardInfo{
		Path: w.id.Path(), Pass: w.id.Pass, Part: w.id.Part,
		Rows: w.rows, Bytes: size, SHA256: sum, Labels: w.labels,
		RowGroups: append([]int64{}, w.rowGroups...),
	}, nil
}

// Abort discards the shard. It is safe after Close and more than once; call it in a defer.
func (w *Writer) Abort() { w.out.Abort() }
