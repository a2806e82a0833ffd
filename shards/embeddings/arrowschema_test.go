package embeddings

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/parquet-go/parquet-go"
)

// pyarrowVersion is the pyarrow make deps-pyarrow installs (testdata/pyarrow-requirements.txt).
const pyarrowVersion = "26.0.1"

// writeFixedSizeFile writes the embedding file of TestFooterArrowSchema and
// TestPyArrowReadsFixedSizeVectors: three rows of 5 values, one unlabelled.
func writeFixedSizeFile(t *testing.T) (path string, rows []Row) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "e.parquet")
	w, err := NewWriter(context.Background(), path, 5, map[string]string{MetaSplit: "test", ClassesKey: ClassesMeta([]string{"cat", "dog"})})
	if err != nil {
		t.Fatal(err)
	}
	rows = []Row{
		{ID: 4, Label: 1, Embedding: []float32{0.5, -1, 2, 1e-7, 3.25}, Key: "test/4.jpg", Split: "test", Class: "dog"},
		{ID: 9, Label: 0, Embedding: []float32{1, 2, 3, 4, 5}, Key: "test/9.jpg", Split: "test", Class: "cat"},
		{ID: 11, Label: -1, Embedding: []float32{-0.125, 0, 0, 0, 7}, Key: "test/11.jpg", Split: "test"},
	}
	for _, r := range rows {
		if err := w.WriteKey(r.ID, r.Key, r.Label, r.Embedding); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path, rows
}

// TestFooterArrowSchema: the footer carries the Arrow schema Arrow's readers restore a
// fixed-size vector from, as arrow-go's IPC reader decodes it: every column with its Parquet
// name and nullability, the embedding a fixed_size_list<float32>[dim] whose element has the
// Parquet leaf's name (pyarrow takes the leaf's name where they differ, readers that match
// columns by name find none), and the footer's metadata (which Arrow's readers give the table instead of the footer's).
func TestFooterArrowSchema(t *testing.T) {
	path, _ := writeFixedSizeFile(t)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pf, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	v, ok := pf.Lookup(arrowSchemaKey)
	if !ok {
		t.Fatalf("the footer has no %s: Arrow's readers see the embedding as a variable-length list", arrowSchemaKey)
	}
	raw, err := base64.StdEncoding.DecodeString(v)
	if err != nil {
		t.Fatalf("%s is not base64: %v", arrowSchemaKey, err)
	}
	r, err := ipc.NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("%s is not an Arrow IPC schema: %v", arrowSchemaKey, err)
	}
	defer r.Release()
	if r.Next() {
		t.Errorf("%s holds a record batch; want the schema alone", arrowSchemaKey)
	}
	if err := r.Err(); err != nil {
		t.Errorf("%s: %v", arrowSchemaKey, err)
	}

	var leaf []string
	for _, path := range pf.Schema().Columns() {
		if path[0] == "embedding" {
			leaf = path
		}
	}
	if len(leaf) != 3 {
		t.Fatalf("the embedding column's path is %q, want the 3-level LIST's embedding.list.element", leaf)
	}
	str := arrow.BinaryTypes.String
	want := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "label", Type: arrow.PrimitiveTypes.Int32},
		{Name: "embedding", Type: arrow.FixedSizeListOfField(5, arrow.Field{Name: leaf[2], Type: arrow.PrimitiveTypes.Float32})},
		{Name: "key", Type: str}, {Name: "split", Type: str}, {Name: "class", Type: str},
	}, nil)
	got := r.Schema()
	if !got.Equal(want) {
		t.Errorf("Arrow schema\n%v\nwant\n%v", got, want)
	}
	// Schema.Equal compares a list's element by type alone.
	if fs, ok := got.Field(2).Type.(*arrow.FixedSizeListType); ok {
		if e := fs.ElemField(); e.Name != leaf[2] || e.Nullable {
			t.Errorf("the embedding's element is %v, want %s not null (the Parquet leaf's name: readers that match columns by name need it)", e, leaf[2])
		}
	}
	if len(got.Fields()) != len(pf.Schema().Fields()) {
		t.Errorf("Arrow schema has %d fields, the Parquet schema %d columns", len(got.Fields()), len(pf.Schema().Fields()))
	}
	var footer, schemaMeta []string
	for _, kv := range pf.Metadata().KeyValueMetadata {
		if kv.Key != arrowSchemaKey {
			footer = append(footer, kv.Key+"="+kv.Value)
		}
	}
	md := got.Metadata()
	for i, k := range md.Keys() {
		schemaMeta = append(schemaMeta, k+"="+md.Values()[i])
	}
	slices.Sort(footer)
	if !slices.Equal(schemaMeta, footer) {
		t.Errorf("Arrow schema's metadata %q, want the footer's %q", schemaMeta, footer)
	}
}

// TestPyArrowReadsFixedSizeVectors reads an embedding file with pyarrow: the embedding column
// is a fixed_size_list<float>[dim], not null, which converts to a rows × dim float32 array with
// no copy, and the other columns and the footer's metadata read as written.
func TestPyArrowReadsFixedSizeVectors(t *testing.T) {
	python := os.Getenv("DCL_PYARROW_PYTHON")
	if python == "" {
		python = filepath.Join("..", "..", ".cache", "pyarrow", "bin", "python")
	}
	if _, err := os.Stat(python); err != nil {
		t.Skip("pyarrow " + pyarrowVersion + " not installed (make deps-pyarrow makes .cache/pyarrow; DCL_PYARROW_PYTHON names another): reading embeddings with pyarrow is skipped")
	}
	path, rows := writeFixedSizeFile(t)
	cmd := exec.Command(python, filepath.Join("testdata", "read_pyarrow.py"), path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("read_pyarrow.py with %s: %v\n%s", python, err, stderr.String())
	}
	var got struct {
		Version         string
		Type            string
		FixedSizeList   bool `json:"fixed_size_list"`
		Nullable        map[string]bool
		Columns         map[string][]any
		Metadata        map[string]string
		Element         string
		ElementNullable bool `json:"element_nullable"`
		Shape           []int
		DType           string
		Vectors         [][]float64
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("read_pyarrow.py's output %s: %v", out, err)
	}
	if got.Version != pyarrowVersion {
		t.Fatalf("pyarrow %s, want %s: make deps-pyarrow installs it", got.Version, pyarrowVersion)
	}
	if !got.FixedSizeList {
		t.Fatalf("pyarrow reads the embedding column as %s, want fixed_size_list<element: float not null>[5]", got.Type)
	}
	if got.Element != "element" || got.ElementNullable || !slices.Equal(got.Shape, []int{3, 5}) || got.DType != "float32" {
		t.Errorf("pyarrow: %s, element %q (nullable %v), array of shape %v and dtype %s; want element \"element\" not null, shape [3 5], float32",
			got.Type, got.Element, got.ElementNullable, got.Shape, got.DType)
	}
	for i, r := range rows {
		vec := make([]float32, len(got.Vectors[i]))
		for j, x := range got.Vectors[i] {
			vec[j] = float32(x)
		}
		if !slices.Equal(vec, r.Embedding) {
			t.Errorf("row %d: pyarrow reads %v, written %v", i, vec, r.Embedding)
		}
	}
	for name, nullable := range got.Nullable {
		if nullable {
			t.Errorf("pyarrow reads column %s as nullable; every column is required", name)
		}
	}
	wantColumns := map[string][]any{
		"id": {4.0, 9.0, 11.0}, "label": {1.0, 0.0, -1.0},
		"key": {"test/4.jpg", "test/9.jpg", "test/11.jpg"}, "split": {"test", "test", "test"}, "class": {"dog", "cat", ""},
	}
	if !reflect.DeepEqual(got.Columns, wantColumns) {
		t.Errorf("pyarrow reads the columns %v, want %v", got.Columns, wantColumns)
	}
	if got.Metadata["dcl.embedding_dim"] != "5" || got.Metadata["dcl.split"] != "test" {
		t.Errorf("pyarrow's table metadata %v lacks the footer's dcl.embedding_dim and dcl.split", got.Metadata)
	}
}
