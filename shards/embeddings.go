package shards

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/parquet-go/parquet-go"

	"github.com/dcl-beam/dcl-beam/internal/storage"
)

// EmbeddingRow is one row of an embedding file: columns id (int64), label (int32) and
// embedding, a Parquet LIST of float32 as pyarrow and pandas write a list column.
type EmbeddingRow struct {
	ID        int64     `parquet:"id"`
	Label     int32     `parquet:"label"`
	Embedding []float32 `parquet:"embedding,list"`
}

// EmbeddingsManifestName is the manifest of a sharded embeddings directory. It is not
// manifest.json, so that neither kind of directory is mistaken for the other.
const EmbeddingsManifestName = "embeddings.json"

// embeddingDimKey is the footer key under which this project's embedding files record their
// dimension, so that opening one needs no data page.
const embeddingDimKey = "dcl.embedding_dim"

// EmbeddingClassesKey is the metadata key, in an embeddings manifest and (prefixed, see
// EmbeddingFooterPrefix) in each embedding file's footer, of the shards' class list
// (Config.Classes) as a JSON array of names.
const EmbeddingClassesKey = "classes"

// EmbeddingFooterPrefix starts every metadata key in an embedding file's footer, as it starts
// a shard's (FormatKey…): the footer is a namespace shared with other tools, the manifest's
// meta is not, so the manifest's keys go without it. OpenEmbeddings gives a single file's
// footer metadata back under the manifest's keys.
const EmbeddingFooterPrefix = "dcl."

// ClassesMeta encodes a class list for EmbeddingClassesKey.
func ClassesMeta(classes []string) string {
	b, _ := json.Marshal(classes) // a []string always encodes
	return string(b)
}

// parseClassesMeta decodes EmbeddingClassesKey's value from where.
func parseClassesMeta(where, v string) ([]string, error) {
	var classes []string
	if err := json.Unmarshal([]byte(v), &classes); err != nil {
		return nil, fmt.Errorf("%s: metadata %q is not a JSON list of class names: %w", where, EmbeddingClassesKey, err)
	}
	if err := CheckClasses(classes); err != nil {
		return nil, fmt.Errorf("%s: metadata %q: %w", where, EmbeddingClassesKey, err)
	}
	return classes, nil
}

// embeddingGroupBytes bounds the float bytes of one row group of an embedding file.
const embeddingGroupBytes = 8 << 20

// EmbeddingFileInfo describes one committed embedding file.
type EmbeddingFileInfo struct {
	Path   string `json:"path"` // relative to the embeddings directory
	Rows   int64  `json:"rows"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// EmbeddingManifest is embeddings.json: the files of a sharded embeddings directory.
type EmbeddingManifest struct {
	Format int                 `json:"format"`
	Dim    int                 `json:"dim"`
	Rows   int64               `json:"rows"`
	Files  []EmbeddingFileInfo `json:"files"`
	// Meta is free provenance: checkpoint, feature, data directory, code version.
	Meta map[string]string `json:"meta,omitempty"`
}

// EmbeddingFileName is the name of part part of parts in a sharded embeddings directory.
func EmbeddingFileName(part, parts int) string {
	return fmt.Sprintf("part-%05d-of-%05d.parquet", part, parts)
}

// EmbeddingWriter writes one embedding file atomically (see Writer). Vectors must all have
// the dimension given to NewEmbeddingWriter.
type EmbeddingWriter struct {
	path      string
	ctx       context.Context
	dim       int
	file      *storage.Writer
	pw        *parquet.GenericWriter[EmbeddingRow]
	batch     []EmbeddingRow
	floats    []float32 // backing store of the batch's vectors
	groupRows int
	maxGroup  int
	rows      int64
	err       error
}

// NewEmbeddingWriter starts the embedding file p (local or gs://) of dim-dimensional
// vectors. meta goes into the file's footer.
func NewEmbeddingWriter(ctx context.Context, p string, dim int, meta map[string]string) (*EmbeddingWriter, error) {
	if dim <= 0 {
		return nil, fmt.Errorf("embedding file %s: dimension %d, want at least 1", p, dim)
	}
	options := []parquet.WriterOption{
		parquet.CreatedBy("dcl-beam", strconv.Itoa(FormatVersion), ""),
		parquet.SkipPageStatistics("embedding", "list", "element"),
		parquet.KeyValueMetadata(embeddingDimKey, strconv.Itoa(dim)),
	}
	for k, v := range meta {
		if !strings.HasPrefix(k, EmbeddingFooterPrefix) {
			k = EmbeddingFooterPrefix + k
		}
		options = append(options, parquet.KeyValueMetadata(k, v))
	}
	f := storage.NewWriter(ctx, p)
	return &EmbeddingWriter{
		path: p, ctx: ctx, dim: dim, file: f,
		pw:       parquet.NewGenericWriter[EmbeddingRow](f, options...),
		maxGroup: max(1, embeddingGroupBytes/(4*dim)),
	}, nil
}

// Write adds one row; vec is copied.
func (w *EmbeddingWriter) Write(id int64, label int32, vec []float32) error {
	if w.err != nil {
		return w.err
	}
	if err := w.ctx.Err(); err != nil {
		return w.fail(err)
	}
	if len(vec) != w.dim {
		return w.fail(fmt.Errorf("embedding file %s: id %d has %d values, want %d", w.path, id, len(vec), w.dim))
	}
	if w.floats == nil {
		w.floats = make([]float32, 0, w.batchRows()*w.dim)
	}
	start := len(w.floats)
	w.floats = append(w.floats, vec...)
	w.batch = append(w.batch, EmbeddingRow{ID: id, Label: label, Embedding: w.floats[start:len(w.floats):len(w.floats)]})
	w.rows++
	if len(w.batch) >= w.batchRows() {
		return w.flush()
	}
	return nil
}

// batchRows is about 1 MiB of floats, and never crosses a row group's end.
func (w *EmbeddingWriter) batchRows() int {
	return min(max(1, (1<<20)/(4*w.dim)), w.maxGroup)
}

func (w *EmbeddingWriter) flush() error {
	if len(w.batch) == 0 {
		return nil
	}
	if _, err := w.pw.Write(w.batch); err != nil {
		return w.fail(fmt.Errorf("writing %s: %w", w.path, err))
	}
	w.groupRows += len(w.batch)
	w.batch, w.floats = w.batch[:0], w.floats[:0]
	if w.groupRows >= w.maxGroup {
		if err := w.pw.Flush(); err != nil {
			return w.fail(fmt.Errorf("writing %s: %w", w.path, err))
		}
		w.groupRows = 0
	}
	return nil
}

func (w *EmbeddingWriter) fail(err error) error {
	if w.err == nil {
		w.err = err
		w.file.Abort()
	}
	return w.err
}

// Close commits the file and returns its entry for an embeddings manifest (Path is the base
// name).
func (w *EmbeddingWriter) Close() (EmbeddingFileInfo, error) {
	if w.err != nil {
		return EmbeddingFileInfo{}, w.err
	}
	if err := w.flush(); err != nil {
		return EmbeddingFileInfo{}, err
	}
	if err := w.ctx.Err(); err != nil {
		return EmbeddingFileInfo{}, w.fail(err)
	}
	if err := w.pw.Close(); err != nil {
		return EmbeddingFileInfo{}, w.fail(fmt.Errorf("writing %s: %w", w.path, err))
	}
	size, sum, err := w.file.Commit()
	if err != nil {
		w.err = err
		return EmbeddingFileInfo{}, err
	}
	w.err = fmt.Errorf("embedding file %s already closed", w.path)
	// A staged file's entry names it as it will be once committed.
	return EmbeddingFileInfo{Path: strings.TrimSuffix(storage.Base(w.path), StagedSuffix), Rows: w.rows, Bytes: size, SHA256: sum}, nil
}

// Abort discards the file; safe after Close and more than once.
func (w *EmbeddingWriter) Abort() {
	if w.err == nil {
		w.err = fmt.Errorf("embedding file %s aborted", w.path)
	}
	w.file.Abort()
}

// EmbeddingPartPath is where a writer of a sharded embeddings directory writes part part of
// parts: under the staging folder, from which CommitEmbeddings moves it into place.
func EmbeddingPartPath(dir string, part, parts int) string {
	return storage.Join(dir, stagedPath(EmbeddingFileName(part, parts)))
}

// CommitEmbeddings finishes a sharded embeddings directory: it checks that the files are
// staged (EmbeddingPartPath) or in place with their sizes, removes temporaries and Parquet
// files not listed, writes embeddings.json, and moves the staged files into place.
func CommitEmbeddings(ctx context.Context, dir string, dim int, files []EmbeddingFileInfo, meta map[string]string) (*EmbeddingManifest, error) {
	m := &EmbeddingManifest{Format: FormatVersion, Dim: dim, Files: slices.Clone(files), Meta: meta}
	slices.SortFunc(m.Files, func(a, b EmbeddingFileInfo) int { return strings.Compare(a.Path, b.Path) })
	all, err := storage.ListTree(ctx, dir)
	if err != nil {
		return nil, err
	}
	present := map[string]bool{}
	for _, f := range all {
		present[f] = true
	}
	listed := map[string]bool{}
	var moves []string
	for _, f := range m.Files {
		if listed[f.Path] {
			return nil, fmt.Errorf("committing %s: file %s listed twice", dir, f.Path)
		}
		listed[f.Path] = true
		at := f.Path
		if staged := stagedPath(f.Path); present[staged] {
			at = staged
			moves = append(moves, f.Path)
		}
		size, err := storage.Size(ctx, storage.Join(dir, at))
		if err != nil {
			return nil, fmt.Errorf("committing %s: %w", dir, err)
		}
		if size != f.Bytes {
			return nil, fmt.Errorf("committing %s: %s has %d bytes, its writer wrote %d", dir, f.Path, size, f.Bytes)
		}
		m.Rows += f.Rows
	}
	for _, f := range all {
		if (strings.HasSuffix(f, ".parquet") && !listed[f] && !strings.HasPrefix(f, StagingDir+"/")) || isTemporary(f) {
			if err := storage.Remove(ctx, storage.Join(dir, f)); err != nil {
				return nil, err
			}
		}
	}
	// embeddings.json goes before the moves, as in Commit: a kill among the renames must not
	// leave files in place with no manifest for a glob to take for whole embeddings.
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := storage.WriteFile(ctx, storage.Join(dir, EmbeddingsManifestName), append(data, '\n')); err != nil {
		return nil, err
	}
	for _, p := range moves {
		if err := storage.Rename(ctx, storage.Join(dir, stagedPath(p)), storage.Join(dir, p)); err != nil {
			return nil, fmt.Errorf("committing %s: %w", dir, err)
		}
	}
	if err := storage.RemoveTree(ctx, storage.Join(dir, StagingDir)); err != nil {
		return nil, err
	}
	return m, nil
}

// EmbeddingBlock is a block of rows of embedding files: Vectors holds Len() rows of Dim
// float32 each, row-major.
type EmbeddingBlock struct {
	IDs     []int64
	Labels  []int32
	Vectors []float32
	Dim     int
}

// Len returns the number of rows in the block.
func (b *EmbeddingBlock) Len() int { return len(b.IDs) }

// Vector returns row i's vector, sharing the block's memory.
func (b *EmbeddingBlock) Vector(i int) []float32 {
	return b.Vectors[i*b.Dim : (i+1)*b.Dim : (i+1)*b.Dim]
}

// EmbeddingReader streams the rows of one embedding file or of a sharded embeddings
// directory in blocks, with memory bounded by the block size and one page per column,
// whatever the size of the files' row groups.
//
// It accepts files written by other tools with the same columns: id and label as INT64 or
// INT32, required or optional (no nulls), and embedding as any one-level list of FLOAT
// (or DOUBLE, converted) values: the 3-level LIST layout with the repeated group named
// list and the element element (pyarrow, parquet-go, DuckDB) or item (arrow-rs, older
// pyarrow), the legacy 2-level layout, or a bare repeated column.
type EmbeddingReader struct {
	ctx       context.Context
	files     []EmbeddingFileSummary
	rows      int64
	dim       int
	blockRows int

	fileIdx int
	cur     *embeddingFile
	group   int
	cursor  *groupCursor
	meta    map[string]string
	classes []string
}

// EmbeddingFileSummary is what opening an embedding file learns without reading its
// vectors: its row count (from the footer) and dimension (from its first row; 0 when empty).
type EmbeddingFileSummary struct {
	Path string
	Rows int64
	Dim  int
	// Classes is the class list in the file's footer (EmbeddingClassesKey); nil without.
	Classes []string
	// Meta is the dcl metadata in the file's footer under the manifest's keys (without
	// EmbeddingFooterPrefix); nil when the footer has none.
	Meta map[string]string
}

// OpenEmbeddings opens path: a Parquet file (of any name), or a directory with
// embeddings.json. Blocks hold up to blockRows rows (default 4096 when blockRows <= 0).
func OpenEmbeddings(ctx context.Context, path string, blockRows int) (*EmbeddingReader, error) {
	if blockRows <= 0 {
		blockRows = 4096
	}
	r := &EmbeddingReader{ctx: ctx, blockRows: blockRows}
	single := strings.HasSuffix(path, ".parquet")
	if !single {
		// Other tools name their files as they like (.pq, no suffix): a file is read as one.
		var err error
		if single, err = isFile(ctx, path); err != nil {
			return nil, err
		}
	}
	var paths []string
	var listed []EmbeddingFileInfo // the manifest's entries of paths, for a directory
	if single {
		paths = []string{path}
	} else {
		mp := storage.Join(path, EmbeddingsManifestName)
		ok, err := storage.Exists(ctx, mp)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("%s: no %s: not a complete embeddings directory (give a .parquet file, or a directory written by dcl embed)", path, EmbeddingsManifestName)
		}
		data, err := storage.ReadFile(ctx, mp)
		if err != nil {
			return nil, err
		}
		var m EmbeddingManifest
		if err := storage.DecodeJSON(data, &m); err != nil {
			return nil, fmt.Errorf("reading %s: %w", mp, err)
		}
		if m.Format != FormatVersion {
			return nil, fmt.Errorf("reading %s: format version %d, this program reads version %d", mp, m.Format, FormatVersion)
		}
		for _, f := range m.Files {
			// The files are the directory's own (CommitEmbeddings lists base names): a path
			// that leads elsewhere is not one of them.
			if f.Path == "" || f.Path == "." || f.Path == ".." || strings.ContainsAny(f.Path, `/\`) {
				return nil, fmt.Errorf("reading %s: file %q is not a file of the directory", mp, f.Path)
			}
			paths = append(paths, storage.Join(path, f.Path))
		}
		listed = m.Files
		r.meta = m.Meta
		if r.meta == nil {
			r.meta = map[string]string{}
		}
		if v, ok := r.meta[EmbeddingClassesKey]; ok {
			if r.classes, err = parseClassesMeta(mp, v); err != nil {
				return nil, err
			}
		}
	}
	// Check every file's schema and dimension now, so a bad file fails before any work is
	// done; each file is opened once here and once more when it is read.
	var dimFrom string // the first file with rows, which set r.dim
	for i, p := range paths {
		f, err := summarizeEmbeddingFile(ctx, p)
		if err != nil {
			return nil, err
		}
		if listed != nil {
			if err := agreesWithManifest(path, f, listed[i], r.meta); err != nil {
				return nil, err
			}
		}
		switch {
		case f.Dim == 0 || f.Dim == r.dim:
		case r.dim == 0:
			r.dim, dimFrom = f.Dim, p
		default:
			return nil, fmt.Errorf("%s has %d-dimensional vectors, %s %d-dimensional (vectors of mixed length)", p, f.Dim, dimFrom, r.dim)
		}
		r.files = append(r.files, f)
		r.rows += f.Rows
	}
	if single {
		// A single file carries in its footer what a directory's manifest carries: the
		// evaluations read the same facts (views, temperature, dataset…) from either.
		r.classes, r.meta = r.files[0].Classes, r.files[0].Meta
	}
	return r, nil
}

// agreesWithManifest refuses a file of an embeddings directory whose rows or footer differ
// from what embeddings.json says of it: the directory holds files of two writers (another
// command wrote into it meanwhile), and its vectors are not those its metadata describes.
func agreesWithManifest(dir string, f EmbeddingFileSummary, info EmbeddingFileInfo, meta map[string]string) error {
	differ := func(has, says string) error {
		return fmt.Errorf("%s: %s %s, but %s says %s: another command wrote into the folder meanwhile; embed again",
			dir, storage.Base(f.Path), has, EmbeddingsManifestName, says)
	}
	if f.Rows != info.Rows {
		return differ(fmt.Sprintf("holds %d rows", f.Rows), strconv.FormatInt(info.Rows, 10))
	}
	for _, k := range slices.Sorted(maps.Keys(meta)) {
		if v, ok := f.Meta[k]; ok && v != meta[k] {
			return differ(fmt.Sprintf("was written with %s %q", k, v), strconv.Quote(meta[k]))
		}
	}
	return nil
}

// summarizeEmbeddingFile opens p, checks its schema and learns the dimension: from the
// footer for this project's files (every row is checked against it when read), from the
// first row for other tools' files.
func summarizeEmbeddingFile(ctx context.Context, p string) (EmbeddingFileSummary, error) {
	ef, err := openEmbeddingFile(ctx, p)
	if err != nil {
		return EmbeddingFileSummary{}, err
	}
	defer ef.Close()
	s := EmbeddingFileSummary{Path: p, Rows: ef.pf.NumRows(), Meta: footerMeta(ef.pf)}
	if v, ok := s.Meta[EmbeddingClassesKey]; ok {
		if s.Classes, err = parseClassesMeta(p, v); err != nil {
			return EmbeddingFileSummary{}, err
		}
	}
	if s.Rows == 0 {
		return s, nil
	}
	if v, ok := ef.pf.Lookup(embeddingDimKey); ok {
		if d, err := strconv.Atoi(v); err == nil && d > 0 {
			s.Dim = d
			return s, nil
		}
	}
	for g, rg := range ef.pf.RowGroups() {
		if rg.NumRows() == 0 {
			continue
		}
		c, err := ef.cursor(g)
		if err != nil {
			return EmbeddingFileSummary{}, err
		}
		_, err = c.readRows(&EmbeddingBlock{}, 1, &s.Dim)
		c.Close()
		if err != nil {
			return EmbeddingFileSummary{}, err
		}
		break
	}
	return s, nil
}

// footerMeta returns the dcl metadata of an embedding file's footer under the manifest's keys;
// nil when there is none. Files written before the footer keys took EmbeddingFooterPrefix
// have them bare: those are read too, but only from a file this project wrote (one with
// embeddingDimKey), never from another tool's footer, whose bare keys mean something else.
func footerMeta(pf *parquet.File) map[string]string {
	kvs := pf.Metadata().KeyValueMetadata
	_, ours := pf.Lookup(embeddingDimKey)
	var meta map[string]string
	set := func(k, v string) {
		if meta == nil {
			meta = map[string]string{}
		}
		meta[k] = v
	}
	for _, kv := range kvs {
		if k, ok := strings.CutPrefix(kv.Key, EmbeddingFooterPrefix); ok && kv.Key != embeddingDimKey {
			set(k, kv.Value)
		}
	}
	if ours {
		for _, kv := range kvs {
			if _, prefixed := meta[kv.Key]; !prefixed && !strings.HasPrefix(kv.Key, EmbeddingFooterPrefix) {
				set(kv.Key, kv.Value)
			}
		}
	}
	return meta
}

// isFile reports whether p is a file (locally: not a directory; on gs://: an object).
func isFile(ctx context.Context, p string) (bool, error) {
	if storage.Scheme(p) == "" {
		info, err := os.Stat(p)
		if err != nil {
			return false, nil // not there: the caller's message about the directory applies
		}
		return !info.IsDir(), nil
	}
	return storage.Exists(ctx, p)
}

// Rows returns the total number of rows, from the files' footers.
func (r *EmbeddingReader) Rows() int64 { return r.rows }

// Dim returns the vectors' dimension (0 when there are no rows).
func (r *EmbeddingReader) Dim() int { return r.dim }

// Meta returns the directory manifest's metadata (empty when it has none), or a single
// file's footer metadata under the same keys (nil when its footer has none).
func (r *EmbeddingReader) Meta() map[string]string { return r.meta }

// Classes returns the class list the embeddings carry (the directory manifest's, or a single
// file's footer's), in label order; nil when they name none.
func (r *EmbeddingReader) Classes() []string { return r.classes }

// Files returns the files read, in order, with their rows and dimensions.
func (r *EmbeddingReader) Files() []EmbeddingFileSummary { return r.files }

// Next returns the next block, or io.EOF after the last.
func (r *EmbeddingReader) Next() (*EmbeddingBlock, error) { return r.next() }

// Close closes the file being read.
func (r *EmbeddingReader) Close() error {
	if r.cursor != nil {
		r.cursor.Close()
		r.cursor = nil
	}
	if r.cur != nil {
		err := r.cur.Close()
		r.cur = nil
		return err
	}
	return nil
}

func (r *EmbeddingReader) next() (*EmbeddingBlock, error) {
	b := &EmbeddingBlock{}
	for b.Len() < r.blockRows {
		if err := r.ctx.Err(); err != nil {
			return nil, err
		}
		if r.cursor == nil {
			ok, err := r.advance()
			if err != nil {
				return nil, err
			}
			if !ok {
				break
			}
		}
		done, err := r.cursor.readRows(b, r.blockRows-b.Len(), &r.dim)
		if err != nil {
			return nil, err
		}
		if done {
			r.cursor.Close()
			r.cursor = nil
			r.group++
		}
	}
	if b.Len() == 0 {
		return nil, io.EOF
	}
	b.Dim = r.dim
	return b, nil
}

// advance moves to the next row group, opening the next file when needed; false at the end.
func (r *EmbeddingReader) advance() (bool, error) {
	for {
		if r.cur == nil {
			if r.fileIdx >= len(r.files) {
				return false, nil
			}
			ef, err := openEmbeddingFile(r.ctx, r.files[r.fileIdx].Path)
			if err != nil {
				return false, err
			}
			r.cur, r.group = ef, 0
			r.fileIdx++
		}
		if r.group < len(r.cur.pf.RowGroups()) {
			c, err := r.cur.cursor(r.group)
			if err != nil {
				return false, err
			}
			r.cursor = c
			return true, nil
		}
		r.cur.Close()
		r.cur = nil
	}
}

// embeddingFile is an open embedding file whose schema has been checked.
type embeddingFile struct {
	path           string
	file           storage.File
	pf             *parquet.File
	id, label, emb *parquet.Column
	embDef         int
	labelIsInt64   bool
	idIsInt32      bool
	embIsDouble    bool
}

func openEmbeddingFile(ctx context.Context, p string) (ef *embeddingFile, err error) {
	f, err := storage.OpenFile(ctx, p)
	if err != nil {
		return nil, err
	}
	// parquet-go panics on some corrupt footers; that is bad input, not a bug.
	defer func() {
		if r := recover(); r != nil {
			f.Close()
			ef, err = nil, fmt.Errorf("%s is not a readable Parquet file: corrupt footer: %v", p, r)
		}
	}()
	opts := []parquet.FileOption{parquet.SkipBloomFilters(true), parquet.SkipPageIndex(true)}
	if storage.Scheme(p) != "" {
		// Remote reads cost a request each: read column pages in large pieces (three
		// columns, so about 12 MiB of buffers per open file).
		opts = append(opts, parquet.ReadBufferSize(4<<20))
	}
	pf, err := parquet.OpenFile(f, f.Size(), opts...)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s is not a readable Parquet file: %w", p, err)
	}
	ef = &embeddingFile{path: p, file: f, pf: pf}
	if err := ef.checkSchema(); err != nil {
		f.Close()
		return nil, err
	}
	return ef, nil
}

func (ef *embeddingFile) Close() error { return ef.file.Close() }

func (ef *embeddingFile) checkSchema() error {
	root := ef.pf.Root()
	var names []string
	for _, c := range root.Columns() {
		names = append(names, c.Name())
	}
	scalar := func(name string) (*parquet.Column, bool, error) {
		c := root.Column(name)
		if c == nil {
			return nil, false, fmt.Errorf("%s has no column %q (it has %s); want id (int64), label (int32), embedding (list of float32)", ef.path, name, strings.Join(names, ", "))
		}
		if !c.Leaf() || c.Repeated() {
			return nil, false, fmt.Errorf("%s: column %q is a list or group, want a single integer", ef.path, name)
		}
		switch c.Type().Kind() {
		case parquet.Int64:
			return c, true, nil
		case parquet.Int32:
			return c, false, nil
		}
		return nil, false, fmt.Errorf("%s: column %q has type %s, want an integer (INT64 or INT32)", ef.path, name, c.Type())
	}
	var err error
	var is64 bool
	if ef.id, is64, err = scalar("id"); err != nil {
		return err
	}
	ef.idIsInt32 = !is64
	if ef.label, ef.labelIsInt64, err = scalar("label"); err != nil {
		return err
	}
	emb := root.Column("embedding")
	if emb == nil {
		return fmt.Errorf("%s has no column \"embedding\" (it has %s); want a list of float32", ef.path, strings.Join(names, ", "))
	}
	var leaves []*parquet.Column
	var walk func(c *parquet.Column)
	walk = func(c *parquet.Column) {
		if c.Leaf() {
			leaves = append(leaves, c)
			return
		}
		for _, s := range c.Columns() {
			walk(s)
		}
	}
	walk(emb)
	if len(leaves) != 1 || leaves[0].MaxRepetitionLevel() != 1 {
		return fmt.Errorf("%s: column \"embedding\" is not a list of numbers (want LIST<float>)", ef.path)
	}
	ef.emb = leaves[0]
	ef.embDef = ef.emb.MaxDefinitionLevel()
	switch ef.emb.Type().Kind() {
	case parquet.Float:
	case parquet.Double:
		ef.embIsDouble = true
	default:
		return fmt.Errorf("%s: column \"embedding\" holds %s values, want FLOAT (float32)", ef.path, ef.emb.Type())
	}
	return nil
}

// cursor starts reading row group g column by column.
func (ef *embeddingFile) cursor(g int) (c *groupCursor, err error) {
	// parquet-go panics on some corrupt column chunks; that is bad input, not a bug.
	defer func() {
		if p := recover(); p != nil {
			c, err = nil, fmt.Errorf("%s row group %d: corrupt data: %v", ef.path, g, p)
		}
	}()
	chunks := ef.pf.RowGroups()[g].ColumnChunks()
	return &groupCursor{
		ef: ef, group: g,
		id:    newValueCursor(chunks[ef.id.Index()]),
		label: newValueCursor(chunks[ef.label.Index()]),
		emb:   newValueCursor(chunks[ef.emb.Index()]),
		rows:  ef.pf.RowGroups()[g].NumRows(),
	}, nil
}

// groupCursor reads the rows of one row group, a page at a time per column.
type groupCursor struct {
	ef             *embeddingFile
	group          int
	id, label, emb *valueCursor
	row, rows      int64
}

func (c *groupCursor) Close() {
	c.id.close()
	c.label.close()
	c.emb.close()
}

func (c *groupCursor) errorf(format string, args ...any) error {
	return fmt.Errorf("%s row group %d, row %d: %s", c.ef.path, c.group, c.row, fmt.Sprintf(format, args...))
}

// readRows appends up to n rows to b; done is true when the row group is exhausted. dim is
// the dimension of the dataset so far (0 before the first row).
func (c *groupCursor) readRows(b *EmbeddingBlock, n int, dim *int) (done bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%s row group %d: corrupt data: %v", c.ef.path, c.group, p)
		}
	}()
	for k := 0; k < n && c.row < c.rows; k++ {
		idv, err := c.id.next()
		if err != nil {
			return false, c.errorf("reading id: %v", err)
		}
		lv, err := c.label.next()
		if err != nil {
			return false, c.errorf("reading label: %v", err)
		}
		if idv.IsNull() || lv.IsNull() {
			return false, c.errorf("id or label is null")
		}
		id := idv.Int64()
		if c.ef.idIsInt32 {
			id = int64(idv.Int32())
		}
		label := int64(lv.Int32())
		if c.ef.labelIsInt64 {
			label = lv.Int64()
		}
		if label < Unlabelled || label > 1<<31-1 {
			return false, c.errorf("id %d: label %d out of range", id, label)
		}
		start := len(b.Vectors)
		for first := true; ; first = false {
			v, err := c.emb.peek()
			if errors.Is(err, io.EOF) && !first {
				break
			}
			if err != nil {
				return false, c.errorf("id %d: reading embedding: %v", id, err)
			}
			if !first && v.RepetitionLevel() == 0 {
				break
			}
			if first && v.RepetitionLevel() != 0 {
				return false, c.errorf("id %d: embedding values out of step with the rows", id)
			}
			c.emb.advance()
			if v.DefinitionLevel() < c.ef.embDef {
				return false, c.errorf("id %d: embedding is null, empty or has a null element", id)
			}
			if c.ef.embIsDouble {
				b.Vectors = append(b.Vectors, float32(v.Double()))
			} else {
				b.Vectors = append(b.Vectors, v.Float())
			}
		}
		got := len(b.Vectors) - start
		if *dim == 0 {
			*dim = got
		} else if got != *dim {
			return false, c.errorf("id %d: embedding has %d values, earlier rows have %d (vectors of mixed length)", id, got, *dim)
		}
		b.IDs = append(b.IDs, id)
		b.Labels = append(b.Labels, int32(label))
		c.row++
	}
	return c.row >= c.rows, nil
}

// valueCursor reads the values of one column chunk page by page, with one value of
// look-ahead (a list ends where the next value starts a row).
type valueCursor struct {
	pages parquet.Pages
	vr    parquet.ValueReader
	buf   []parquet.Value
	i, n  int
	eof   bool
}

func newValueCursor(chunk parquet.ColumnChunk) *valueCursor {
	return &valueCursor{pages: chunk.Pages(), buf: make([]parquet.Value, 1024)}
}

func (c *valueCursor) peek() (parquet.Value, error) {
	for c.i >= c.n {
		if c.eof {
			return parquet.Value{}, io.EOF
		}
		if c.vr == nil {
			page, err := c.pages.ReadPage()
			if errors.Is(err, io.EOF) {
				c.eof = true
				continue
			}
			if err != nil {
				return parquet.Value{}, err
			}
			c.vr = page.Values()
		}
		n, err := c.vr.ReadValues(c.buf)
		c.i, c.n = 0, n
		if errors.Is(err, io.EOF) {
			c.vr = nil
		} else if err != nil {
			return parquet.Value{}, err
		}
	}
	return c.buf[c.i], nil
}

func (c *valueCursor) advance() { c.i++ }

func (c *valueCursor) next() (parquet.Value, error) {
	v, err := c.peek()
	if err == nil {
		c.advance()
	}
	return v, err
}

func (c *valueCursor) close() { c.pages.Close() }
