package embeddings

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/internal/testing/gcstest"
)

type embRow struct {
	id    int64
	label int32
	vec   []float32
}

func readEmbeddings(t *testing.T, path string, block int) ([]embRow, *Reader) {
	t.Helper()
	r, err := Open(context.Background(), path, block)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	defer r.Close()
	var out []embRow
	for b, err := range r.Blocks() {
		if err != nil {
			t.Fatalf("Blocks: %v", err)
		}
		if b.Len() > block {
			t.Fatalf("block of %d rows, asked for %d", b.Len(), block)
		}
		for i := range b.Len() {
			out = append(out, embRow{b.IDs[i], b.Labels[i], slices.Clone(b.Vector(i))})
		}
	}
	return out, r
}

func embRowsEqual(a, b []embRow) bool {
	return slices.EqualFunc(a, b, func(x, y embRow) bool {
		return x.id == y.id && x.label == y.label && slices.Equal(x.vec, y.vec)
	})
}

func testEmbedding(id int64, dim int) []float32 {
	v := make([]float32, dim)
	for j := range v {
		v[j] = float32(id)*0.5 + float32(j)
	}
	return v
}

func TestEmbeddingFileRoundTrip(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	p := filepath.Join(dir, "emb.parquet")
	w, err := NewWriter(ctx, p, 5, map[string]string{"dcl.feature": "backbone"})
	if err != nil {
		t.Fatal(err)
	}
	w.maxGroup = 7 // several row groups, so blocks cross them
	for i := range int64(40) {
		if err := w.Write(i, int32(i%4), testEmbedding(i, 5)); err != nil {
			t.Fatal(err)
		}
	}
	info, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	if info.Rows != 40 || info.Path != "emb.parquet" || len(info.SHA256) != 64 {
		t.Errorf("info %+v", info)
	}
	for _, block := range []int{1, 3, 7, 100} {
		rows, r := readEmbeddings(t, p, block)
		if len(rows) != 40 || r.Rows() != 40 || r.Dim() != 5 {
			t.Fatalf("block %d: %d rows (reader says %d), dim %d", block, len(rows), r.Rows(), r.Dim())
		}
		for i, row := range rows {
			if row.id != int64(i) || row.label != int32(i%4) || !slices.Equal(row.vec, testEmbedding(int64(i), 5)) {
				t.Fatalf("row %d = %+v", i, row)
			}
		}
	}
	// The schema is the LIST layout pyarrow writes.
	data, _ := os.ReadFile(p)
	pf, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	if s := pf.Schema().String(); !strings.Contains(s, "group embedding (LIST)") || !strings.Contains(s, "repeated group list") || !strings.Contains(s, "float element") {
		t.Errorf("schema:\n%s", s)
	}
	if len(pf.RowGroups()) != 6 {
		t.Errorf("%d row groups, want 6", len(pf.RowGroups()))
	}
}

// Files written by other Parquet implementations (testdata/make-*.mjs wrote them).
func TestEmbeddingFilesFromOtherTools(t *testing.T) {
	tests := []struct {
		file string
		want []embRow
	}{
		// arrow-rs (parquet-wasm): list<item: float>, optional columns, int64 labels as pandas writes.
		{"testdata/arrow-rs-list-item.parquet", []embRow{{10, 0, []float32{1, 2, 3}}, {11, 1, []float32{4, 5, 6}}, {12, 2, []float32{7, 8, 9.5}}}},
		// DuckDB: list<element: float>, the layout pyarrow writes by default.
		{"testdata/duckdb-list-element.parquet", func() []embRow {
			var rows []embRow
			for i := range int64(5) {
				f := float32(i)
				rows = append(rows, embRow{i, int32(i % 3), []float32{f, f * 0.5, -f, 0.25}})
			}
			return rows
		}()},
	}
	for _, tt := range tests {
		t.Run(filepath.Base(tt.file), func(t *testing.T) {
			got, _ := readEmbeddings(t, tt.file, 2)
			if !embRowsEqual(got, tt.want) {
				t.Errorf("read %v, want %v", got, tt.want)
			}
		})
	}
}

// Other layouts of the same columns, written with parquet-go's own schema from Go types.
type legacyTwoLevel struct {
	ID        int64 `parquet:"id"`
	Label     int32 `parquet:"label"`
	Embedding struct {
		Array []float32 `parquet:"array"`
	} `parquet:"embedding"`
}

type listItemDouble struct {
	ID        *int32 `parquet:"id,optional"`
	Label     *int64 `parquet:"label,optional"`
	Embedding struct {
		List []struct {
			Item float64 `parquet:"item"`
		} `parquet:"list"`
	} `parquet:"embedding"`
}

type bareRepeated struct {
	ID        int64     `parquet:"id"`
	Label     int32     `parquet:"label"`
	Embedding []float32 `parquet:"embedding"`
}

func writeParquet[T any](t *testing.T, p string, rows []T) {
	t.Helper()
	var buf bytes.Buffer
	w := parquet.NewGenericWriter[T](&buf)
	if _, err := w.Write(rows); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestEmbeddingOtherLayouts(t *testing.T) {
	dir := t.TempDir()
	want := []embRow{{1, 0, []float32{1, 2}}, {2, 1, []float32{3, 4}}}
	var a []legacyTwoLevel
	var b []listItemDouble
	var c []bareRepeated
	for _, w := range want {
		var l legacyTwoLevel
		l.ID, l.Label, l.Embedding.Array = w.id, w.label, w.vec
		a = append(a, l)
		var d listItemDouble
		id, label := int32(w.id), int64(w.label)
		d.ID, d.Label = &id, &label
		for _, v := range w.vec {
			d.Embedding.List = append(d.Embedding.List, struct {
				Item float64 `parquet:"item"`
			}{float64(v)})
		}
		b = append(b, d)
		c = append(c, bareRepeated{w.id, w.label, w.vec})
	}
	writeParquet(t, filepath.Join(dir, "two-level.parquet"), a)
	writeParquet(t, filepath.Join(dir, "item-double.parquet"), b)
	writeParquet(t, filepath.Join(dir, "bare.parquet"), c)
	writeParquet(t, filepath.Join(dir, "bare.pq"), c) // another tool's name for a Parquet file
	for _, f := range []string{"two-level.parquet", "item-double.parquet", "bare.parquet", "bare.pq"} {
		got, _ := readEmbeddings(t, filepath.Join(dir, f), 10)
		if !embRowsEqual(got, want) {
			t.Errorf("%s: read %v, want %v", f, got, want)
		}
	}
}

func TestEmbeddingBadFiles(t *testing.T) {
	dir := t.TempDir()
	notParquet := filepath.Join(dir, "notes.parquet")
	os.WriteFile(notParquet, []byte("id,label,embedding\n1,2,3\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "notes.csv"), []byte("id,label,embedding\n1,2,3\n"), 0o644)

	type noLabel struct {
		ID        int64     `parquet:"id"`
		Embedding []float32 `parquet:"embedding,list"`
	}
	writeParquet(t, filepath.Join(dir, "no-label.parquet"), []noLabel{{1, []float32{1}}})
	type stringLabel struct {
		ID        int64     `parquet:"id"`
		Label     string    `parquet:"label"`
		Embedding []float32 `parquet:"embedding,list"`
	}
	writeParquet(t, filepath.Join(dir, "string-label.parquet"), []stringLabel{{1, "cat", []float32{1}}})
	type intEmbedding struct {
		ID        int64   `parquet:"id"`
		Label     int32   `parquet:"label"`
		Embedding []int32 `parquet:"embedding,list"`
	}
	writeParquet(t, filepath.Join(dir, "int-embedding.parquet"), []intEmbedding{{1, 0, []int32{1}}})
	writeParquet(t, filepath.Join(dir, "mixed.parquet"), []Row{{ID: 1, Embedding: []float32{1, 2, 3}}, {ID: 2, Embedding: []float32{1, 2, 3}}, {ID: 3, Embedding: []float32{1, 2}}})
	writeParquet(t, filepath.Join(dir, "empty-vector.parquet"), []Row{{ID: 1, Embedding: []float32{1}}, {ID: 2}})
	writeParquet(t, filepath.Join(dir, "bad-label.parquet"), []Row{{ID: 1, Label: -5, Embedding: []float32{1}}})
	type nullable struct {
		ID        *int64    `parquet:"id,optional"`
		Label     int32     `parquet:"label"`
		Embedding []float32 `parquet:"embedding,list"`
	}
	one := int64(1)
	writeParquet(t, filepath.Join(dir, "null-id.parquet"), []nullable{{&one, 0, []float32{1}}, {nil, 0, []float32{1}}})

	tests := []struct {
		file string
		want string
	}{
		{"notes.parquet", "notes.parquet is not a readable Parquet file"},
		{"notes.csv", "notes.csv is not a readable Parquet file"},
		{"no-label.parquet", `no-label.parquet has no column "label" (it has id, embedding)`},
		{"string-label.parquet", `string-label.parquet: column "label" has type STRING, want an integer`},
		{"int-embedding.parquet", `int-embedding.parquet: column "embedding" holds INT(32,true) values, want FLOAT (float32)`},
		{"mixed.parquet", "mixed.parquet row group 0, row 2: id 3: embedding has 2 values, earlier rows have 3 (vectors of mixed length)"},
		{"empty-vector.parquet", "empty-vector.parquet row group 0, row 1: id 2: embedding is null, empty or has a null element"},
		{"bad-label.parquet", "bad-label.parquet row group 0, row 0: id 1: label -5 out of range"},
		{"null-id.parquet", "null-id.parquet row group 0, row 1: id or label is null"},
		{"missing.parquet", "missing.parquet"},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			r, err := Open(context.Background(), filepath.Join(dir, tt.file), 100)
			if err == nil {
				err = io.EOF // what is left if Blocks yields no error
				for b, e := range r.Blocks() {
					if e != nil && b != nil {
						t.Errorf("Blocks yielded a block with its error %v", e)
					}
					if e != nil {
						err = e
					}
				}
			}
			if errors.Is(err, io.EOF) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("reading %s = %v, want an error containing %q", tt.file, err, tt.want)
			}
		})
	}
	if _, err := Open(context.Background(), dir, 10); err == nil || !strings.Contains(err.Error(), "no embeddings.json") {
		t.Errorf("a directory without embeddings.json = %v", err)
	}
}

func TestShardedEmbeddingsOnGCS(t *testing.T) {
	ctx := context.Background()
	dir := gcstest.Start(t, "emb") + "/run1/test"
	var infos []FileInfo
	id := int64(0)
	for part := range 3 {
		w, err := NewWriter(ctx, storage.Join(dir, FileName(part, 3)), 4, nil)
		if err != nil {
			t.Fatal(err)
		}
		for range 5 + part {
			if err := w.Write(id, int32(id%2), testEmbedding(id, 4)); err != nil {
				t.Fatal(err)
			}
			id++
		}
		info, err := w.Close()
		if err != nil {
			t.Fatal(err)
		}
		infos = append(infos, info)
	}
	if _, err := Open(ctx, dir, 4); err == nil {
		t.Error("a directory without its manifest was read")
	}
	// A file from an earlier, larger run is not listed: Commit removes it.
	if err := storage.WriteFile(ctx, storage.Join(dir, FileName(3, 4)), []byte("stale")); err != nil {
		t.Fatal(err)
	}
	m, err := Commit(ctx, dir, 4, infos, map[string]string{"feature": "backbone"})
	if err != nil {
		t.Fatal(err)
	}
	if m.Rows != 18 || len(m.Files) != 3 {
		t.Errorf("manifest %+v", m)
	}
	if ok, _ := storage.Exists(ctx, storage.Join(dir, FileName(3, 4))); ok {
		t.Error("the stale file is still there")
	}
	rows, r := readEmbeddings(t, dir, 4)
	if len(rows) != 18 || r.Rows() != 18 || len(r.Files()) != 3 {
		t.Fatalf("read %d rows from %d files", len(rows), len(r.Files()))
	}
	for part, f := range r.Files() {
		if want := storage.Join(dir, FileName(part, 3)); f.Path != want || f.Rows != int64(5+part) || f.Dim != 4 {
			t.Errorf("file %d = %+v; want %s with %d rows of 4 values", part, f, want, 5+part)
		}
	}
	for i, row := range rows {
		if row.id != int64(i) || !slices.Equal(row.vec, testEmbedding(int64(i), 4)) {
			t.Fatalf("row %d = %+v", i, row)
		}
	}
}

func TestEmbeddingWriterRefusesWrongDimension(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "e.parquet")
	w, err := NewWriter(context.Background(), p, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(1, 0, []float32{1, 2}); err == nil || !strings.Contains(err.Error(), "id 1 has 2 values, want 3") {
		t.Errorf("Write of a short vector = %v", err)
	}
	if _, err := w.Close(); err == nil {
		t.Error("Close after a failed Write succeeded")
	}
	if files, err := storage.ListTree(context.Background(), dir); err != nil || len(files) > 0 {
		t.Errorf("files left behind: %v (%v)", files, err)
	}
}

// A directory whose files disagree on the dimension (say, written by hand from two runs) is
// refused at open, naming both files; an empty file has no dimension and agrees with any.
func TestEmbeddingDirectoryOfMixedDimensions(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	var infos []FileInfo
	for part, dim := range []int{0, 3, 3, 5} {
		p := storage.Join(dir, FileName(part, 4))
		w, err := NewWriter(ctx, p, max(dim, 1), nil)
		if err != nil {
			t.Fatal(err)
		}
		if dim > 0 {
			for id := range int64(2) {
				if err := w.Write(id, 0, testEmbedding(id, dim)); err != nil {
					t.Fatal(err)
				}
			}
		}
		info, err := w.Close()
		if err != nil {
			t.Fatal(err)
		}
		infos = append(infos, info)
	}
	if _, err := Commit(ctx, dir, 3, infos, nil); err != nil {
		t.Fatal(err)
	}
	_, err := Open(ctx, dir, 0)
	want := fmt.Sprintf("%s has 5-dimensional vectors, %s 3-dimensional", storage.Join(dir, FileName(3, 4)), storage.Join(dir, FileName(1, 4)))
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Open = %v; want an error containing %q", err, want)
	}
	// Without the odd file the set opens, and the empty file has dimension 0.
	if _, err := Commit(ctx, dir, 3, infos[:3], nil); err != nil {
		t.Fatal(err)
	}
	r, err := Open(ctx, dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Dim() != 3 || r.Rows() != 4 || r.Files()[0].Dim != 0 || r.Files()[0].Rows != 0 {
		t.Errorf("dim %d, rows %d, files %+v", r.Dim(), r.Rows(), r.Files())
	}
}

// An embeddings.json that lists a file outside its directory, a key twice, or data after the
// manifest is refused, naming the manifest.
func TestEmbeddingsManifestRefusesForeignPaths(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		give, want string
	}{
		{`{"format":1,"dim":2,"rows":1,"files":[{"path":"../outside.parquet","rows":1}]}`, `file "../outside.parquet" is not a file of the directory`},
		{`{"format":1,"dim":2,"rows":1,"files":[{"path":"/etc/passwd","rows":1}]}`, `file "/etc/passwd" is not a file of the directory`},
		{`{"format":1,"dim":2,"dim":3,"files":[]}`, `key "dim" given twice`},
		{`{"format":1,"dim":2,"files":[]} {}`, "data after the JSON value"},
	}
	for _, tt := range tests {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, ManifestName), []byte(tt.give), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Open(ctx, dir, 0)
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), ManifestName) {
			t.Errorf("%s: %v, want an error naming the manifest and saying %q", tt.give, err, tt.want)
		}
	}
}

// writeFooterFile writes a one-row embedding file whose footer holds exactly kvs, as an
// older dcl (bare keys) or another tool (its own keys, or dcl.-prefixed ones) would.
func writeFooterFile(t *testing.T, p string, kvs map[string]string) {
	t.Helper()
	var buf bytes.Buffer
	var opts []parquet.WriterOption
	for k, v := range kvs {
		opts = append(opts, parquet.KeyValueMetadata(k, v))
	}
	w := parquet.NewGenericWriter[Row](&buf, opts...)
	if _, err := w.Write([]Row{{ID: 1, Label: 0, Embedding: []float32{1, 2}}}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A single embedding file gives back the metadata it was written with, under the manifest's
// keys, as a directory's embeddings.json does; its footer keys carry the dcl. prefix of the
// shards' footers; files of older dcl versions (bare keys) still read, other tools' bare keys
// are not taken for dcl's.
func TestEmbeddingFileFooterMeta(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	classes := ClassesMeta([]string{"cat", "dog"})

	written := filepath.Join(dir, "written.parquet")
	w, err := NewWriter(ctx, written, 2, map[string]string{"views": "2", "temperature": "0.2", ClassesKey: classes})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(1, 0, []float32{1, 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Close(); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(written)
	pf, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range pf.Metadata().KeyValueMetadata {
		if !strings.HasPrefix(kv.Key, FooterPrefix) && kv.Key != arrowSchemaKey {
			t.Errorf("footer key %q lacks the %s prefix", kv.Key, FooterPrefix)
		}
	}

	old := filepath.Join(dir, "old.parquet")
	writeFooterFile(t, old, map[string]string{dimKey: "2", "views": "2", "temperature": "0.2", ClassesKey: classes})
	foreignBare := filepath.Join(dir, "foreign-bare.parquet")
	writeFooterFile(t, foreignBare, map[string]string{"views": "2", "temperature": "0.2"})
	foreignPrefixed := filepath.Join(dir, "foreign-prefixed.parquet")
	writeFooterFile(t, foreignPrefixed, map[string]string{"dcl.views": "2", "dcl.temperature": "0.2", "dcl.classes": classes, "views": "1"})

	want := map[string]string{"views": "2", "temperature": "0.2", ClassesKey: classes}
	tests := []struct {
		give        string
		want        map[string]string
		wantClasses []string
	}{
		{written, want, []string{"cat", "dog"}},
		{old, want, []string{"cat", "dog"}},
		{foreignBare, nil, nil},
		{foreignPrefixed, want, []string{"cat", "dog"}},
	}
	for _, tt := range tests {
		t.Run(filepath.Base(tt.give), func(t *testing.T) {
			r, err := Open(ctx, tt.give, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if got := r.Meta(); !maps.Equal(got, tt.want) || (tt.want == nil) != (got == nil) {
				t.Errorf("Meta() = %v, want %v", got, tt.want)
			}
			if !slices.Equal(r.Classes(), tt.wantClasses) {
				t.Errorf("Classes() = %v, want %v", r.Classes(), tt.wantClasses)
			}
		})
	}
}

// TestEmbeddingsWrittenByTwoWritersAreRefused: a part file replaced by another writer's after
// the manifest was committed (two embeds into one folder on two machines) is refused, naming
// the file and what differs: its footer's checkpoint, or its row count.
func TestEmbeddingsWrittenByTwoWritersAreRefused(t *testing.T) {
	ctx := context.Background()
	write := func(dir, checkpoint string, rows int) []FileInfo {
		var infos []FileInfo
		for part := range 2 {
			w, err := NewWriter(ctx, storage.Join(dir, FileName(part, 2)), 4, map[string]string{"checkpoint": checkpoint})
			if err != nil {
				t.Fatal(err)
			}
			for id := range rows {
				if err := w.Write(int64(id), 0, testEmbedding(int64(id), 4)); err != nil {
					t.Fatal(err)
				}
			}
			info, err := w.Close()
			if err != nil {
				t.Fatal(err)
			}
			infos = append(infos, info)
		}
		return infos
	}
	for _, tt := range []struct {
		name, checkpoint string
		rows             int
		want             string
	}{
		{"another checkpoint", "runs/b", 3, `part-00001-of-00002.parquet was written with checkpoint "runs/b", but embeddings.json says "runs/a"`},
		{"other rows", "runs/a", 4, "part-00001-of-00002.parquet holds 4 rows, but embeddings.json says 3"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			infos := write(dir, "runs/a", 3)
			if _, err := Commit(ctx, dir, 4, infos, map[string]string{"checkpoint": "runs/a"}); err != nil {
				t.Fatal(err)
			}
			other := t.TempDir()
			write(other, tt.checkpoint, tt.rows)
			data, err := os.ReadFile(filepath.Join(other, FileName(1, 2)))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, FileName(1, 2)), data, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err = Open(ctx, dir, 4)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want %q", err, tt.want)
			}
		})
	}
}

// TestEmbeddingsManifestMustDescribeItsFiles: an embeddings.json whose dimension, row count,
// file sizes or SHA-256s are not its files' is refused, as is a file with a byte flipped.
func TestEmbeddingsManifestMustDescribeItsFiles(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	var infos []FileInfo
	for part := range 2 {
		w, err := NewWriter(ctx, storage.Join(dir, FileName(part, 2)), 4, nil)
		if err != nil {
			t.Fatal(err)
		}
		for id := range int64(50) {
			if err := w.Write(id, 0, testEmbedding(id, 4)); err != nil {
				t.Fatal(err)
			}
		}
		info, err := w.Close()
		if err != nil {
			t.Fatal(err)
		}
		infos = append(infos, info)
	}
	if _, err := Commit(ctx, dir, 4, infos, nil); err != nil {
		t.Fatal(err)
	}
	mp := filepath.Join(dir, ManifestName)
	pristine, err := os.ReadFile(mp)
	if err != nil {
		t.Fatal(err)
	}
	part := filepath.Join(dir, FileName(1, 2))
	partData, err := os.ReadFile(part)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Open(ctx, dir, 0)
	if err != nil {
		t.Fatalf("the pristine directory: %v", err)
	}
	r.Close()
	for _, tt := range []struct {
		name string
		edit func(m *Manifest)
		flip bool
		want string
	}{
		{"dimension", func(m *Manifest) { m.Dim = 5 }, false, "says 5-dimensional vectors, its files hold 4-dimensional ones"},
		{"rows", func(m *Manifest) { m.Rows = 7 }, false, "says 7 rows, its files hold 100"},
		{"size", func(m *Manifest) { m.Files[1].Bytes++ }, false, "is " + strconv.Itoa(len(partData)) + " bytes"},
		{"sha256", func(m *Manifest) { m.Files[1].SHA256 = strings.Repeat("0", 64) }, false, "has SHA-256 " + infos[1].SHA256},
		{"a flipped byte", nil, true, FileName(1, 2)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var m Manifest
			if err := json.Unmarshal(pristine, &m); err != nil {
				t.Fatal(err)
			}
			data := slices.Clone(partData)
			if tt.edit != nil {
				tt.edit(&m)
			}
			if tt.flip {
				data[len(data)/3] ^= 0x40
			}
			b, _ := json.Marshal(m)
			if err := os.WriteFile(mp, b, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(part, data, 0o644); err != nil {
				t.Fatal(err)
			}
			r, err := Open(ctx, dir, 0)
			if err == nil {
				r.Close()
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want %q", err, tt.want)
			}
		})
	}
}

// A row says what it is without the manifest: its example key, its split and its class's
// name (none for an unlabelled image), beside the id, label and vector that files of earlier
// versions hold; such a file still reads, with no keys.
func TestRowsSayWhatTheyAre(t *testing.T) {
	ctx := context.Background()
	p := filepath.Join(t.TempDir(), "e.parquet")
	w, err := NewWriter(ctx, p, 2, map[string]string{MetaSplit: "test", ClassesKey: ClassesMeta([]string{"cat", "dog"})})
	if err != nil {
		t.Fatal(err)
	}
	for i, label := range []int32{0, 1, -1} {
		if err := w.WriteKey(int64(i), fmt.Sprintf("test/%d.jpg", i), label, []float32{float32(i), 1}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	rows, err := parquet.Read[Row](f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	want := []Row{{0, 0, []float32{0, 1}, "test/0.jpg", "test", "cat"}, {1, 1, []float32{1, 1}, "test/1.jpg", "test", "dog"}, {2, -1, []float32{2, 1}, "test/2.jpg", "test", ""}}
	if !reflect.DeepEqual(rows, want) {
		t.Errorf("rows %+v, want %+v", rows, want)
	}
	r, err := Open(ctx, p, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for b, err := range r.Blocks() {
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(b.Keys, []string{"test/0.jpg", "test/1.jpg", "test/2.jpg"}) {
			t.Errorf("keys %q", b.Keys)
		}
	}

	old := filepath.Join(t.TempDir(), "old.parquet")
	writeParquet(t, old, []bareRepeated{{ID: 7, Label: 1, Embedding: []float32{1, 2}}})
	got, _ := readEmbeddings(t, old, 1)
	if !embRowsEqual(got, []embRow{{7, 1, []float32{1, 2}}}) {
		t.Errorf("a file without key, split and class columns read as %v", got)
	}
}
