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
// digests are those of the format with the key, split and class columns and the footer's Arrow
// schema (the layout of c0acd5e's shards.NewEmbeddingWriter before them). A change of the
// format (a parquet-go or arrow-go upgrade, an option) shows here, and must come with a reason.
func TestWrittenBytesAreUnchanged(t *testing.T) {
	file, part0, part1, manifest := writeGolden(t)
	for _, c := range []struct{ name, got, want string }{
		{"one.parquet", file, "7b98156de929dac13fa86597e5a7dbe4a0ac9c4098438f189ab4484bc7f04ac0"},
		{FileName(0, 2), part0, "3b7897e7f897742aa6420e6800192f7bb0bab7054dc54266ffa09fe571058957"},
		{FileName(1, 2), part1, "8e79cce239f0aad7acb9de35a9826df30c8af701f0fa114eea682f12c41a172a"},
		{ManifestName, manifest, "e2b78118f6e50d6107ebefdb5d4676db850ad0fb4f810b83b0f0bead0500de0d"},
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
