package embeddings

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
)

// Any embedding-file bytes give rows or an error, never a panic.
func FuzzEmbeddingFile(f *testing.F) {
	for _, name := range []string{"testdata/arrow-rs-list-item.parquet", "testdata/duckdb-list-element.parquet"} {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, len(data)/2, byte(0x40))
	}
	// This project's own file, whose footer carries the dimension and the class list.
	dir := f.TempDir()
	own := filepath.Join(dir, "own.parquet")
	w, err := NewWriter(context.Background(), own, 3, map[string]string{ClassesKey: ClassesMeta([]string{"a", "b"})})
	if err != nil {
		f.Fatal(err)
	}
	for i := range 5 {
		if err := w.Write(int64(i), int32(i%2), []float32{float32(i), 1, 2}); err != nil {
			f.Fatal(err)
		}
	}
	if _, err := w.Close(); err != nil {
		f.Fatal(err)
	}
	data, err := os.ReadFile(own)
	if err != nil {
		f.Fatal(err)
	}
	for _, at := range []int{len(data) - 40, len(data) - 120, len(data) / 2} {
		f.Add(data, at, byte(0x01))
	}
	f.Fuzz(func(t *testing.T, data []byte, at int, x byte) {
		data = bytes.Clone(data)
		if len(data) > 0 && at >= 0 {
			data[at%len(data)] ^= x
		}
		p := filepath.Join(dir, "fuzz.parquet")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		readAllEmbeddings(context.Background(), p, 2)
	})
}

// Any embeddings.json bytes give an embeddings directory or an error, never a panic.
func FuzzEmbeddingsManifest(f *testing.F) {
	ctx := context.Background()
	dir := f.TempDir()
	w, err := NewWriter(ctx, filepath.Join(dir, FileName(0, 1)), 2, nil)
	if err != nil {
		f.Fatal(err)
	}
	if err := w.Write(1, 0, []float32{1, 2}); err != nil {
		f.Fatal(err)
	}
	info, err := w.Close()
	if err != nil {
		f.Fatal(err)
	}
	_, err = Commit(ctx, dir, 2, []FileInfo{info}, map[string]string{ClassesKey: ClassesMeta([]string{"x"})})
	if err != nil {
		f.Fatal(err)
	}
	good, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{"format":1,"dim":2,"files":[{"path":"../../etc/passwd"}]}`))
	f.Add([]byte(`{"format":1,"meta":{"classes":"[\"a\",\"a\"]"},"files":[]}`))
	f.Add([]byte(`{"format":1,"format":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(filepath.Join(dir, ManifestName), data, 0o644); err != nil {
			t.Fatal(err)
		}
		readAllEmbeddings(ctx, dir, 4)
	})
}

// readAllEmbeddings opens the embeddings at path (blocks of blockRows) and reads them to their end or first error:
// what a fuzz target checks is only that no input panics.
func readAllEmbeddings(ctx context.Context, path string, blockRows int) {
	r, err := Open(ctx, path, blockRows)
	if err != nil {
		return
	}
	defer r.Close()
	for {
		if _, err := r.Next(); err != nil {
			return
		}
	}
}
