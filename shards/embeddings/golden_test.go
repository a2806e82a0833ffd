package embeddings

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
)

// TestWrittenBytesAreUnchanged pins the bytes of a file and of a sharded directory: the
// digests are those the writer and commit made before they moved to this package
// (shards.NewEmbeddingWriter and shards.CommitEmbeddings at c0acd5e). A change of the
// format (a parquet-go upgrade, an option) shows here, and must come with a reason.
func TestWrittenBytesAreUnchanged(t *testing.T) {
	file, part0, part1, manifest := writeGolden(t)
	for _, c := range []struct{ name, got, want string }{
		{"one.parquet", file, "29b52c35f307ffcd847770544891b48c02ef1a6ef98c0a5ad4f4bdd59df0fa48"},
		{FileName(0, 2), part0, "cc0d980a41f3f6fa448bb2ec7ebbb654f601d3bb4ed18f0b08f34e1a92e130a2"},
		{FileName(1, 2), part1, "1e736737c1615a52fbfe9db554f16ca3fe7a3a6e1c408c42a0b269f282fa3725"},
		{ManifestName, manifest, "441a72c3af21371e39e64418549090e8f3ec8f6a1295e3a8e902d974266d9179"},
	} {
		if c.got != c.want {
			t.Errorf("%s: sha256 %s, want %s", c.name, c.got, c.want)
		}
	}
}

// writeGolden writes the embedding file and directory whose bytes TestWrittenBytesAreUnchanged
// pins, and returns the file's, the directory's files' and embeddings.json's digests.
func writeGolden(t *testing.T) (file, part0, part1, manifest string) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	digest := func(p string) string {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		return hex.EncodeToString(sum[:])
	}
	meta := map[string]string{ClassesKey: ClassesMeta([]string{"a", "b", "c"}), "feature": "backbone", "dataset": "toy"}
	write := func(p string, dim, rows, from int) FileInfo {
		w, err := NewWriter(ctx, p, dim, meta)
		if err != nil {
			t.Fatal(err)
		}
		vec := make([]float32, dim)
		for i := from; i < from+rows; i++ {
			for j := range vec {
				vec[j] = float32(i*dim+j)*0.001 - 3
			}
			if err := w.Write(int64(3*i+1), int32(i%3), vec); err != nil {
				t.Fatal(err)
			}
		}
		info, err := w.Close()
		if err != nil {
			t.Fatal(err)
		}
		return info
	}
	// 2,100 rows of 1,024 values: two row groups (8 MiB of floats each at most).
	write(filepath.Join(dir, "one.parquet"), 1024, 2100, 0)
	sharded := filepath.Join(dir, "sharded")
	infos := []FileInfo{write(PartPath(sharded, 0, 2), 8, 5, 0), write(PartPath(sharded, 1, 2), 8, 3, 5)}
	if _, err := Commit(ctx, sharded, 8, infos, meta); err != nil {
		t.Fatal(err)
	}
	return digest(filepath.Join(dir, "one.parquet")), digest(filepath.Join(sharded, FileName(0, 2))),
		digest(filepath.Join(sharded, FileName(1, 2))), digest(filepath.Join(sharded, ManifestName))
}
