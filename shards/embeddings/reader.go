package embeddings

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/parquet-go/parquet-go"

	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/shards"
)

// Block is a block of rows of embedding files: Vectors holds Len() rows of Dim
// float32 each, row-major.
type Block struct {
	IDs    []int64
	Labels []int32
	// Keys are the rows' example keys: "" where a file has no key column (files of earlier
	// versions, and other tools').
	Keys    []string
	Vectors []float32
	Dim     int
}

// Len returns the number of rows in the block.
func (b *Block) Len() int { return len(b.IDs) }

// Vector returns row i's vector, sharing the block's memory.
func (b *Block) Vector(i int) []float32 {
	return b.Vectors[i*b.Dim : (i+1)*b.Dim : (i+1)*b.Dim]
}

// Reader streams the rows of one embedding file or of a sharded embeddings
// directory in blocks, with memory bounded by the block size and one page per column,
// whatever the size of the files' row groups.
//
// It accepts files written by other tools with the same columns: id and label as INT64 or
// INT32, required or optional (no nulls), and embedding as any one-level list of FLOAT
// (or DOUBLE, converted) values: the 3-level LIST layout with the repeated group named
// list and the element element (pyarrow, parquet-go, DuckDB) or item (arrow-rs, older
// pyarrow), the legacy 2-level layout, or a bare repeated column.
type Reader struct {
	ctx       context.Context
	files     []FileSummary
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

// FileSummary is what opening an embedding file learns without reading its
// vectors: its row count (from the footer) and dimension (from its first row; 0 when empty).
type FileSummary struct {
	Path string
	Rows int64
	Dim  int
	// Classes is the class list in the file's footer (ClassesKey); nil without.
	Classes []string
	// Meta is the dcl metadata in the file's footer under the manifest's keys (without
	// FooterPrefix); nil when the footer has none.
	Meta map[string]string
}

// Open opens path: a Parquet file (of any name), or a directory with
// embeddings.json. Blocks hold up to blockRows rows (default 4096 when blockRows <= 0).
func Open(ctx context.Context, path string, blockRows int) (*Reader, error) {
	if blockRows <= 0 {
		blockRows = 4096
	}
	r := &Reader{ctx: ctx, blockRows: blockRows}
	single := strings.HasSuffix(path, ".parquet")
	if !single {
		// Other tools name their files as they like (.pq, no suffix): a file is read as one.
		var err error
		if single, err = isFile(ctx, path); err != nil {
			return nil, err
		}
	}
	var paths []string
	var listed []FileInfo // the manifest's entries of paths, for a directory
	var manifest Manifest
	if single {
		paths = []string{path}
	} else {
		mp := storage.Join(path, ManifestName)
		ok, err := storage.Exists(ctx, mp)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("%s: no %s: not a complete embeddings directory (give a .parquet file, or a directory written by dcl embed)", path, ManifestName)
		}
		data, err := storage.ReadFile(ctx, mp)
		if err != nil {
			return nil, err
		}
		m := &manifest
		if err := storage.DecodeJSON(data, m); err != nil {
			return nil, fmt.Errorf("reading %s: %w", mp, err)
		}
		if m.Format != shards.FormatVersion {
			return nil, fmt.Errorf("reading %s: format version %d, this program reads version %d", mp, m.Format, shards.FormatVersion)
		}
		for _, f := range m.Files {
			// The files are the directory's own (Commit lists base names): a path
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
		if v, ok := r.meta[ClassesKey]; ok {
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
			if err := agreesWithManifest(ctx, path, f, listed[i], r.meta); err != nil {
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
	if listed != nil {
		mp := storage.Join(path, ManifestName)
		switch {
		case r.rows != manifest.Rows:
			return nil, fmt.Errorf("%s says %d rows, its files hold %d: it does not describe them; embed again", mp, manifest.Rows, r.rows)
		case r.rows > 0 && r.dim != manifest.Dim:
			return nil, fmt.Errorf("%s says %d-dimensional vectors, its files hold %d-dimensional ones: it does not describe them; embed again", mp, manifest.Dim, r.dim)
		}
	}
	if single {
		// A single file carries in its footer what a directory's manifest carries: the
		// evaluations read the same facts (views, temperature, dataset…) from either.
		r.classes, r.meta = r.files[0].Classes, r.files[0].Meta
	}
	return r, nil
}

// agreesWithManifest refuses a file of an embeddings directory whose rows, footer, size or
// SHA-256 differ from what embeddings.json says of it: the directory holds files of two
// writers (another command wrote into it meanwhile), or a file was damaged or altered, and
// its vectors are not those its metadata describes.
func agreesWithManifest(ctx context.Context, dir string, f FileSummary, info FileInfo, meta map[string]string) error {
	differ := func(has, says string) error {
		return fmt.Errorf("%s: %s %s, but %s says %s: another command wrote into the folder meanwhile, or the file was damaged; embed again",
			dir, storage.Base(f.Path), has, ManifestName, says)
	}
	if f.Rows != info.Rows {
		return differ(fmt.Sprintf("holds %d rows", f.Rows), strconv.FormatInt(info.Rows, 10))
	}
	for _, k := range slices.Sorted(maps.Keys(meta)) {
		if v, ok := f.Meta[k]; ok && v != meta[k] {
			return differ(fmt.Sprintf("was written with %s %q", k, v), strconv.Quote(meta[k]))
		}
	}
	sum, size, err := shards.ChecksumFile(ctx, f.Path)
	switch {
	case err != nil:
		return err
	case size != info.Bytes:
		return differ(fmt.Sprintf("is %d bytes", size), strconv.FormatInt(info.Bytes, 10))
	case sum != info.SHA256:
		return differ("has SHA-256 "+sum, info.SHA256)
	}
	return nil
}

// CheckFile refuses the file p unless its size and SHA-256 are what info says (what its
// writer reported).
func CheckFile(ctx context.Context, p string, info FileInfo) error {
	sum, size, err := shards.ChecksumFile(ctx, p)
	switch {
	case err != nil:
		return err
	case size != info.Bytes || sum != info.SHA256:
		return fmt.Errorf("%s is %d bytes of SHA-256 %s, its writer wrote %d bytes of SHA-256 %s: it changed since", p, size, sum, info.Bytes, info.SHA256)
	}
	return nil
}

// summarizeEmbeddingFile opens p, checks its schema and learns the dimension: from the
// footer for this project's files (every row is checked against it when read), from the
// first row for other tools' files.
func summarizeEmbeddingFile(ctx context.Context, p string) (FileSummary, error) {
	ef, err := openEmbeddingFile(ctx, p)
	if err != nil {
		return FileSummary{}, err
	}
	defer ef.Close()
	s := FileSummary{Path: p, Rows: ef.pf.NumRows(), Meta: footerMeta(ef.pf)}
	if v, ok := s.Meta[ClassesKey]; ok {
		if s.Classes, err = parseClassesMeta(p, v); err != nil {
			return FileSummary{}, err
		}
	}
	if s.Rows == 0 {
		return s, nil
	}
	if v, ok := ef.pf.Lookup(dimKey); ok {
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
			return FileSummary{}, err
		}
		_, err = c.readRows(&Block{}, 1, &s.Dim)
		c.Close()
		if err != nil {
			return FileSummary{}, err
		}
		break
	}
	return s, nil
}

// footerMeta returns the dcl metadata of an embedding file's footer under the manifest's keys;
// nil when there is none. Files written before the footer keys took FooterPrefix
// have them bare: those are read too, but only from a file this project wrote (one with
// dimKey), never from another tool's footer, whose bare keys mean something else; the Arrow
// schema, which Arrow's readers and not this program's read, is not among them.
func footerMeta(pf *parquet.File) map[string]string {
	kvs := pf.Metadata().KeyValueMetadata
	_, ours := pf.Lookup(dimKey)
	var meta map[string]string
	set := func(k, v string) {
		if meta == nil {
			meta = map[string]string{}
		}
		meta[k] = v
	}
	for _, kv := range kvs {
		if k, ok := strings.CutPrefix(kv.Key, FooterPrefix); ok && kv.Key != dimKey {
			set(k, kv.Value)
		}
	}
	if ours {
		for _, kv := range kvs {
			if _, prefixed := meta[kv.Key]; !prefixed && !strings.HasPrefix(kv.Key, FooterPrefix) && kv.Key != arrowSchemaKey {
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
func (r *Reader) Rows() int64 { return r.rows }

// Dim returns the vectors' dimension (0 when there are no rows).
func (r *Reader) Dim() int { return r.dim }

// Meta returns the directory manifest's metadata (empty when it has none), or a single
// file's footer metadata under the same keys (nil when its footer has none).
func (r *Reader) Meta() map[string]string { return r.meta }

// Classes returns the class list the embeddings carry (the directory manifest's, or a single
// file's footer's), in label order; nil when they name none.
func (r *Reader) Classes() []string { return r.classes }

// Files returns the files read, in order, with their rows and dimensions.
func (r *Reader) Files() []FileSummary { return r.files }

// Next returns the next block, or io.EOF after the last.
func (r *Reader) Next() (*Block, error) { return r.next() }

// Blocks ranges over the blocks Next returns, up to the last: a failure ends it, yielded
// with a nil block.
func (r *Reader) Blocks() iter.Seq2[*Block, error] {
	return func(yield func(*Block, error) bool) {
		for {
			b, err := r.next()
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				yield(nil, err)
				return
			}
			if !yield(b, nil) {
				return
			}
		}
	}
}

// Close closes the file being read.
func (r *Reader) Close() error {
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

func (r *Reader) next() (*Block, error) {
	b := &Block{}
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
func (r *Reader) advance() (bool, error) {
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
	key            *parquet.Column // nil where the file has no key column
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
	if k := root.Column("key"); k != nil && k.Leaf() && !k.Repeated() && k.Type().Kind() == parquet.ByteArray {
		ef.key = k
	}
	switch ef.emb.Type().Kind() {
	case parquet.Float:
	case parquet.Double:
		ef.embIsDouble = true
	default:
		return fmt.Errorf("%s: column \"embedding\" holds %s values, want FLOAT (float32)", ef.path, ef.emb.Type())
	}
	return nil
}

// cursor starts reading row group g: parquet-go's row reader assembles its rows (every value
// with its column and levels), reading a page at a time per column.
func (ef *embeddingFile) cursor(g int) (c *groupCursor, err error) {
	// parquet-go panics on some corrupt column chunks; that is bad input, not a bug.
	defer func() {
		if p := recover(); p != nil {
			c, err = nil, fmt.Errorf("%s row group %d: corrupt data: %v", ef.path, g, p)
		}
	}()
	rg := ef.pf.RowGroups()[g]
	return &groupCursor{ef: ef, group: g, reader: rg.Rows(), rows: rg.NumRows(), buf: make([]parquet.Row, cursorRows)}, nil
}

// cursorRows is the number of rows a cursor takes from parquet-go at once.
const cursorRows = 32

// groupCursor reads the rows of one row group.
type groupCursor struct {
	ef        *embeddingFile
	group     int
	reader    parquet.Rows
	buf       []parquet.Row // rows read and not yet taken: buf[next:end]
	next, end int
	row, rows int64
}

func (c *groupCursor) Close() { c.reader.Close() }

func (c *groupCursor) errorf(format string, args ...any) error {
	return fmt.Errorf("%s row group %d, row %d: %s", c.ef.path, c.group, c.row, fmt.Sprintf(format, args...))
}

// readRows appends up to n rows to b; done is true when the row group is exhausted. dim is
// the dimension of the dataset so far (0 before the first row).
func (c *groupCursor) readRows(b *Block, n int, dim *int) (done bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%s row group %d: corrupt data: %v", c.ef.path, c.group, p)
		}
	}()
	ef := c.ef
	idCol, labelCol, embCol := ef.id.Index(), ef.label.Index(), ef.emb.Index()
	keyCol := -1
	if ef.key != nil {
		keyCol = ef.key.Index()
	}
	for k := 0; k < n && c.row < c.rows; k++ {
		if c.next == c.end {
			got, err := c.reader.ReadRows(c.buf[:min(int64(len(c.buf)), c.rows-c.row)])
			if got == 0 {
				if err == nil || errors.Is(err, io.EOF) {
					err = io.ErrUnexpectedEOF
				}
				return false, c.errorf("reading: %v", err)
			}
			c.next, c.end = 0, got
		}
		row := c.buf[c.next]
		c.next++
		var id, label int64
		var key string
		var haveID, haveLabel bool
		start := len(b.Vectors)
		empty := false
		for _, v := range row {
			switch v.Column() {
			case idCol:
				if haveID = !v.IsNull(); haveID {
					id = v.Int64()
					if ef.idIsInt32 {
						id = int64(v.Int32())
					}
				}
			case labelCol:
				if haveLabel = !v.IsNull(); haveLabel {
					label = int64(v.Int32())
					if ef.labelIsInt64 {
						label = v.Int64()
					}
				}
			case keyCol:
				if !v.IsNull() {
					key = string(v.ByteArray())
				}
			case embCol:
				switch {
				case v.DefinitionLevel() < ef.embDef:
					empty = true
				case ef.embIsDouble:
					b.Vectors = append(b.Vectors, float32(v.Double()))
				default:
					b.Vectors = append(b.Vectors, v.Float())
				}
			}
		}
		switch {
		case !haveID || !haveLabel:
			return false, c.errorf("id or label is null")
		case label < shards.Unlabelled || label > 1<<31-1:
			return false, c.errorf("id %d: label %d out of range", id, label)
		case empty:
			return false, c.errorf("id %d: embedding is null, empty or has a null element", id)
		}
		got := len(b.Vectors) - start
		if *dim == 0 {
			*dim = got
		} else if got != *dim {
			return false, c.errorf("id %d: embedding has %d values, earlier rows have %d (vectors of mixed length)", id, got, *dim)
		}
		b.IDs = append(b.IDs, id)
		b.Labels = append(b.Labels, int32(label))
		b.Keys = append(b.Keys, key)
		c.row++
	}
	return c.row >= c.rows, nil
}
