package embeddings

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/parquet-go/parquet-go"

	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/shards"
)

// Row is one row of an embedding file: columns id (int64, the image's index in its source),
// label (int32, -1 for unlabelled) and embedding, a Parquet LIST of float32 laid out as pyarrow
// writes a fixed_size_list<float>, which the readers of earlier versions read; then key (the
// example's key in the shards), split and class (the label's class name, "" for unlabelled),
// so that a table of embeddings says what each row is without the manifest. Every row of a
// file has vectors of the footer's dimension (dcl.embedding_dim), which the footer's Arrow
// schema (arrowSchemaKey) states too, for Arrow's readers.
type Row struct {
	ID        int64     `parquet:"id"`
	Label     int32     `parquet:"label"`
	Embedding []float32 `parquet:"embedding,list"`
	Key       string    `parquet:"key"`
	Split     string    `parquet:"split,dict"`
	Class     string    `parquet:"class,dict"`
}

// schema is Row's, under the root name the files have carried since the type was
// shards.EmbeddingRow (parquet-go names a schema after its Go type, and the name is in every
// footer): renaming the type must not change the files' bytes.
var schema = parquet.NewSchema("EmbeddingRow", parquet.SchemaOf(Row{}))

// ManifestName is the manifest of a sharded embeddings directory. It is not
// manifest.json, so that neither kind of directory is mistaken for the other.
const ManifestName = "embeddings.json"

// dimKey is the footer key under which this project's embedding files record their
// dimension, so that opening one needs no data page.
const dimKey = "dcl.embedding_dim"

// ClassesKey is the metadata key, in an embeddings manifest and (prefixed, see
// FooterPrefix) in each embedding file's footer, of the shards' class list
// (Config.Classes) as a JSON array of names.
const ClassesKey = "classes"

// FooterPrefix starts every metadata key in an embedding file's footer, as it starts
// a shard's (FormatKey…): the footer is a namespace shared with other tools, the manifest's
// meta is not, so the manifest's keys go without it. Open gives a single file's
// footer metadata back under the manifest's keys.
const FooterPrefix = "dcl."

// ClassesMeta encodes a class list for ClassesKey.
func ClassesMeta(classes []string) string {
	b, _ := json.Marshal(classes) // a []string always encodes
	return string(b)
}

// parseClassesMeta decodes ClassesKey's value from where.
func parseClassesMeta(where, v string) ([]string, error) {
	var classes []string
	if err := json.Unmarshal([]byte(v), &classes); err != nil {
		return nil, fmt.Errorf("%s: metadata %q is not a JSON list of class names: %w", where, ClassesKey, err)
	}
	if err := shards.CheckClasses(classes); err != nil {
		return nil, fmt.Errorf("%s: metadata %q: %w", where, ClassesKey, err)
	}
	return classes, nil
}

// groupBytes bounds the float bytes of one row group of an embedding file.
const groupBytes = 8 << 20

// FileInfo describes one committed embedding file.
type FileInfo struct {
	Path   string `json:"path"` // relative to the embeddings directory
	Rows   int64  `json:"rows"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// Manifest is embeddings.json: the files of a sharded embeddings directory.
type Manifest struct {
	Format int        `json:"format"`
	Dim    int        `json:"dim"`
	Rows   int64      `json:"rows"`
	Files  []FileInfo `json:"files"`
	// Meta is free provenance: checkpoint, feature, data directory, code version.
	Meta map[string]string `json:"meta,omitempty"`
}

// FileName is the name of part part of parts in a sharded embeddings directory.
func FileName(part, parts int) string {
	return fmt.Sprintf("part-%05d-of-%05d.parquet", part, parts)
}

// Writer writes one embedding file atomically (see Writer). Vectors must all have
// the dimension given to NewWriter.
type Writer struct {
	path      string
	ctx       context.Context
	dim       int
	out       *shards.ParquetFile[Row] // holds the sticky error
	batch     []Row
	floats    []float32 // backing store of the batch's vectors
	groupRows int
	maxGroup  int
	rows      int64
	// split and classes fill each row's split and class columns (from the footer's
	// metadata, MetaSplit and ClassesKey).
	split   string
	classes []string
}

// NewWriter starts the embedding file p (local or gs://) of dim-dimensional
// vectors. meta goes into the file's footer.
func NewWriter(ctx context.Context, p string, dim int, meta map[string]string) (*Writer, error) {
	if dim <= 0 {
		return nil, fmt.Errorf("embedding file %s: dimension %d, want at least 1", p, dim)
	}
	footer := map[string]string{dimKey: strconv.Itoa(dim)}
	for k, v := range meta {
		if !strings.HasPrefix(k, FooterPrefix) {
			k = FooterPrefix + k
		}
		footer[k] = v
	}
	arrowSchema, err := arrowSchema(dim, footer)
	if err != nil {
		return nil, fmt.Errorf("embedding file %s: %w", p, err)
	}
	options := []parquet.WriterOption{
		schema,
		parquet.CreatedBy("dcl-beam", strconv.Itoa(shards.FormatVersion), ""),
		parquet.SkipPageStatistics("embedding", "list", "element"),
		parquet.KeyValueMetadata(arrowSchemaKey, arrowSchema),
	}
	for k, v := range footer {
		options = append(options, parquet.KeyValueMetadata(k, v))
	}
	var classes []string
	if v, ok := meta[ClassesKey]; ok {
		if classes, err = parseClassesMeta("embedding file "+p, v); err != nil {
			return nil, err
		}
	}
	return &Writer{
		path: p, ctx: ctx, dim: dim, split: meta[MetaSplit], classes: classes,
		out:      shards.NewParquetFile[Row](ctx, p, p, "embedding file "+p, options...),
		maxGroup: max(1, groupBytes/(4*dim)),
	}, nil
}

// Write adds one row without a key; vec is copied.
func (w *Writer) Write(id int64, label int32, vec []float32) error {
	return w.WriteKey(id, "", label, vec)
}

// WriteKey adds one row with its example key; vec is copied.
func (w *Writer) WriteKey(id int64, key string, label int32, vec []float32) error {
	if err := w.out.Err(); err != nil {
		return err
	}
	if err := w.ctx.Err(); err != nil {
		return w.out.Fail(err)
	}
	if len(vec) != w.dim {
		return w.out.Fail(fmt.Errorf("embedding file %s: id %d has %d values, want %d", w.path, id, len(vec), w.dim))
	}
	if w.floats == nil {
		w.floats = make([]float32, 0, w.batchRows()*w.dim)
	}
	start := len(w.floats)
	w.floats = append(w.floats, vec...)
	class := ""
	if label >= 0 && int(label) < len(w.classes) {
		class = w.classes[label]
	}
	w.batch = append(w.batch, Row{ID: id, Label: label, Embedding: w.floats[start:len(w.floats):len(w.floats)],
		Key: key, Split: w.split, Class: class})
	w.rows++
	if len(w.batch) >= w.batchRows() {
		return w.flush()
	}
	return nil
}

// batchRows is about 1 MiB of floats, and never crosses a row group's end.
func (w *Writer) batchRows() int {
	return min(max(1, (1<<20)/(4*w.dim)), w.maxGroup)
}

func (w *Writer) flush() error {
	if len(w.batch) == 0 {
		return nil
	}
	if err := w.out.Write(w.batch); err != nil {
		return err
	}
	w.groupRows += len(w.batch)
	w.batch, w.floats = w.batch[:0], w.floats[:0]
	if w.groupRows >= w.maxGroup {
		if err := w.out.Flush(); err != nil {
			return err
		}
		w.groupRows = 0
	}
	return nil
}

// Close commits the file and returns its entry for an embeddings manifest (Path is the base
// name).
func (w *Writer) Close() (FileInfo, error) {
	if err := w.out.Err(); err != nil {
		return FileInfo{}, err
	}
	if err := w.flush(); err != nil {
		return FileInfo{}, err
	}
	size, sum, err := w.out.Commit()
	if err != nil {
		return FileInfo{}, err
	}
	// A staged file's entry names it as it will be once committed.
	return FileInfo{Path: strings.TrimSuffix(storage.Base(w.path), shards.StagedSuffix), Rows: w.rows, Bytes: size, SHA256: sum}, nil
}

// Abort discards the file; safe after Close and more than once.
func (w *Writer) Abort() { w.out.Abort() }

// PartPath is where a writer of a sharded embeddings directory writes part part of parts:
// under the staging folder, from which Commit moves it into place.
func PartPath(dir string, part, parts int) string {
	return storage.Join(dir, shards.StagedPath(FileName(part, parts)))
}

// Commit finishes a sharded embeddings directory (shards.StagedCommit): it checks that the
// files are staged (PartPath) or in place with their sizes, removes temporaries, Parquet
// files not listed and an earlier embeddings.json, moves the staged files into place, and
// writes embeddings.json last: it is there only when every file it lists is.
func Commit(ctx context.Context, dir string, dim int, files []FileInfo, meta map[string]string) (*Manifest, error) {
	m := &Manifest{Format: shards.FormatVersion, Dim: dim, Files: slices.Clone(files), Meta: meta}
	slices.SortFunc(m.Files, func(a, b FileInfo) int { return strings.Compare(a.Path, b.Path) })
	for _, f := range m.Files {
		m.Rows += f.Rows
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	c := shards.StagedCommit{Dir: dir, Kind: "file", ManifestName: ManifestName, Manifest: append(data, '\n'),
		Stray: func(rel string) bool {
			return strings.HasSuffix(rel, ".parquet") && !strings.HasPrefix(rel, shards.StagingDir+"/")
		}}
	for _, f := range m.Files {
		c.Files = append(c.Files, shards.StagedFile{Path: f.Path, Bytes: f.Bytes})
	}
	if err := c.Commit(ctx); err != nil {
		return nil, err
	}
	return m, nil
}
