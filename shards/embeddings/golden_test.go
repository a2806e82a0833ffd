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
// digests are those of the format with the key, split and class columns (the layout of
// c0acd5e's shards.NewEmbeddingWriter before them). A change of the format (a parquet-go
// upgrade, an option) shows here, and must come with a reason.
func TestWrittenBytesAreUnchanged(t *testing.T) {
	file, part0, part1, manifest := writeGolden(t)
	for _, c := range []struct{ name, got, want string }{
		{"one.parquet", file, "1c7d19fcd10c8240856c060debdacc3420815f4d887e96529f5d11cfa7f76990"},
		{FileName(0, 2), part0, "ed22e39f50c8c38f14eb958b3adfba9c54cb74ce2a1a6ddfead51669c1503ef6"},
		{FileName(1, 2), part1, "5f386e717836d0c3d777cadd90fb51408f8a16aa8422873ffbffa35476f50902"},
		{ManifestName, manifest, "2b0964a120aa599aa5d553ae813af256de8083d6eca5f4141c303818ce62409d"},
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
