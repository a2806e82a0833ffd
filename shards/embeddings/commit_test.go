package embeddings

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/testing/testfiles"
)

// TestCommitWritesTheManifestLast is fault injection at each step of a directory's commit
// over an earlier complete one: a folder where the step removes the earlier embeddings.json
// or moves a part into place fails that step. Wherever the commit stops, no embeddings.json
// is left (so none names a part that is not in place, or an earlier run's part), and every
// Parquet file a DIR/**/*.parquet glob finds is a whole part under its final name; the same
// commit, run again without the fault, completes the directory.
func TestCommitWritesTheManifestLast(t *testing.T) {
	ctx := context.Background()
	const parts, rows = 3, 10
	stage := func(t *testing.T, dir string, first int64) []FileInfo {
		t.Helper()
		var infos []FileInfo
		for part := range parts {
			w, err := NewWriter(ctx, PartPath(dir, part, parts), 4, nil)
			if err != nil {
				t.Fatal(err)
			}
			for i := range int64(rows) {
				id := first + int64(part)*rows + i
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
		return infos
	}
	steps := []string{ManifestName}
	for part := range parts {
		steps = append(steps, FileName(part, parts))
	}
	for _, step := range steps {
		t.Run(step, func(t *testing.T) {
			dir := t.TempDir()
			if _, err := Commit(ctx, dir, 4, stage(t, dir, 0), nil); err != nil {
				t.Fatal(err)
			}
			infos := stage(t, dir, 1000)
			fault := filepath.Join(dir, step)
			if err := os.Remove(fault); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Join(fault, "in-the-way"), 0o755); err != nil {
				t.Fatal(err)
			}
			if _, err := Commit(ctx, dir, 4, infos, nil); err == nil {
				t.Fatalf("the commit went past a folder at %s", step)
			}
			if st, err := os.Stat(filepath.Join(dir, ManifestName)); err == nil && st.Mode().IsRegular() {
				t.Errorf("a commit stopped at %s left %s", step, ManifestName)
			}
			for _, f := range testfiles.GlobParquet(t, dir, false) {
				r, err := Open(ctx, filepath.Join(dir, f), 0)
				if err != nil {
					t.Errorf("a commit stopped at %s: the glob finds %s, which does not open: %v", step, f, err)
					continue
				}
				if r.Rows() != rows || filepath.Dir(f) != "." {
					t.Errorf("a commit stopped at %s: the glob finds %s with %d rows, want a whole part (%d rows) in place", step, f, r.Rows(), rows)
				}
				r.Close()
			}
			if err := os.RemoveAll(fault); err != nil {
				t.Fatal(err)
			}
			if _, err := Commit(ctx, dir, 4, infos, nil); err != nil {
				t.Fatalf("the commit run again: %v", err)
			}
			got, _ := readEmbeddings(t, dir, 64)
			if len(got) != parts*rows || got[0].id != 1000 {
				t.Errorf("the directory holds %d rows from id %d, want %d from 1000", len(got), got[0].id, parts*rows)
			}
		})
	}
}
