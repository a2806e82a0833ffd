package shards

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/storage"
)

// A damaged shard (any bytes at all) gives an error, never a panic: through the footer check
// and through reading every row group.
func FuzzShardFile(f *testing.F) {
	dir := f.TempDir()
	cfg := testConfig()
	cfg.Passes, cfg.Parts = 1, 1
	writeDataset(f, dir, cfg, 6, WriterOptions{RowGroupBytes: 500})
	good, err := os.ReadFile(filepath.Join(dir, ShardID{Pass: 0, Part: 0, Parts: 1}.Path()))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good, 0, byte(0))
	f.Add(good, len(good)/2, byte(0xff))
	f.Add(good, len(good)-9, byte(0x10))
	f.Add(good[:len(good)-1], 4, byte(1))
	// Found by this fuzzer: a footer whose column count turns negative made parquet.OpenFile
	// panic ("slice bounds out of range [::-11]") before checkShardFooter recovered it.
	f.Add(good, 3616, byte(1))
	f.Fuzz(func(t *testing.T, data []byte, at int, x byte) {
		data = bytes.Clone(data)
		if len(data) > 0 && at >= 0 {
			data[at%len(data)] ^= x
		}
		sf, err := checkShardFooter("fuzz.parquet", storage.BytesFile(data))
		if err != nil {
			return
		}
		for g := range sf.pf.RowGroups() {
			if _, err := sf.readRowGroup(g, nil); err != nil {
				return
			}
		}
	})
}

// Any manifest bytes give a manifest or an error, never a panic.
func FuzzParseManifest(f *testing.F) {
	m := writeDataset(f, f.TempDir(), testConfig(), 5, WriterOptions{})
	good, err := m.Marshal()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{"format":1}`))
	f.Add([]byte(`{"format":1,"config":{"passes":1,"parts":1},"shards":[{"path":"pass-000/part-00000-of-00001.parquet"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := parseManifest("fuzz.json", data)
		if err == nil {
			if err := m.Validate(); err != nil {
				t.Errorf("parseManifest accepted a manifest Validate refuses: %v", err)
			}
		}
	})
}

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
	w, err := NewEmbeddingWriter(context.Background(), own, 3, map[string]string{EmbeddingClassesKey: ClassesMeta([]string{"a", "b"})})
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
	w, err := NewEmbeddingWriter(ctx, filepath.Join(dir, EmbeddingFileName(0, 1)), 2, nil)
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
	_, err = CommitEmbeddings(ctx, dir, 2, []EmbeddingFileInfo{info}, map[string]string{EmbeddingClassesKey: ClassesMeta([]string{"x"})})
	if err != nil {
		f.Fatal(err)
	}
	good, err := os.ReadFile(filepath.Join(dir, EmbeddingsManifestName))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{"format":1,"dim":2,"files":[{"path":"../../etc/passwd"}]}`))
	f.Add([]byte(`{"format":1,"meta":{"classes":"[\"a\",\"a\"]"},"files":[]}`))
	f.Add([]byte(`{"format":1,"format":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(filepath.Join(dir, EmbeddingsManifestName), data, 0o644); err != nil {
			t.Fatal(err)
		}
		readAllEmbeddings(ctx, dir, 4)
	})
}

// readAllEmbeddings opens the embeddings at path (blocks of blockRows) and reads them to their end or first error:
// what a fuzz target checks is only that no input panics.
func readAllEmbeddings(ctx context.Context, path string, blockRows int) {
	r, err := OpenEmbeddings(ctx, path, blockRows)
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
