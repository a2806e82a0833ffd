package shards

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/internal/testing/gcstest"
)

// The whole life of a dataset on gs://, against a real GCS emulator: prepare, write, commit,
// verify, read shuffled and sequentially, damage, and refuse.
func TestDatasetOnGCS(t *testing.T) {
	ctx := context.Background()
	bucket := gcstest.Start(t, "shards")
	dir := bucket + "/cifar/train"
	cfg := testConfig()
	cfg.Encoding = PNG
	m := writeDataset(t, dir, cfg, 24, WriterOptions{RowGroupBytes: 2000, BatchBytes: 500})

	files, err := storage.ListTree(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 7 || files[0] != ManifestName || files[1] != "pass-000/part-00000-of-00003.parquet" {
		t.Fatalf("files on GCS: %v", files)
	}
	sum, err := Verify(ctx, dir)
	if err != nil || sum.Rows != 48 || sum.Views != 96 {
		t.Fatalf("Verify on GCS = %+v, %v", sum, err)
	}

	r, err := NewReader(ctx, dir, ReaderOptions{BatchSize: 5, Seed: 9, Epoch: 1, Window: 2, KeepPartial: true})
	if err != nil {
		t.Fatal(err)
	}
	got, _, _ := readAll(t, r)
	if s := slices.Sorted(slices.Values(got)); len(s) != 24 || s[0] != 0 || s[23] != 23 {
		t.Errorf("shuffled read on GCS: %v", got)
	}
	// The same order as a local copy: the order depends on the manifest, not the storage.
	local := t.TempDir()
	writeDataset(t, local, cfg, 24, WriterOptions{RowGroupBytes: 2000, BatchBytes: 500})
	r, _ = NewReader(ctx, local, ReaderOptions{BatchSize: 5, Seed: 9, Epoch: 1, Window: 2, KeepPartial: true})
	if want, _, _ := readAll(t, r); !slices.Equal(got, want) {
		t.Errorf("GCS order %v, local order %v", got, want)
	}
	seq, err := NewSequentialReader(ctx, dir, 7)
	if err != nil {
		t.Fatal(err)
	}
	if all, _, _ := readAll(t, seq); len(all) != 48 {
		t.Errorf("sequential read on GCS: %d rows", len(all))
	}

	// A different dataset is refused; damage is found.
	other := cfg
	other.Seed = 1234
	var dd *DifferentDatasetError
	if err := Prepare(ctx, dir, other, false); !errors.As(err, &dd) {
		t.Errorf("Prepare over another dataset on GCS = %v", err)
	}
	if err := storage.Remove(ctx, storage.Join(dir, m.Shards[4].Path)); err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(ctx, dir); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("Verify with a missing shard on GCS = %v", err)
	}
	if err := storage.Remove(ctx, storage.Join(dir, ManifestName)); err != nil {
		t.Fatal(err)
	}
	if _, err := NewReader(ctx, dir, ReaderOptions{BatchSize: 1}); !errors.Is(err, ErrNoManifest) {
		t.Errorf("reader on GCS without a manifest = %v", err)
	}
}

// A cancelled write to GCS must not commit a partial object.
func TestWriterOnGCSCancelled(t *testing.T) {
	bucket := gcstest.Start(t, "cancel")
	dir := bucket + "/d"
	ctx, cancel := context.WithCancel(context.Background())
	w, err := NewWriter(ctx, dir, ShardID{Pass: 0, Part: 0, Parts: 3}, testConfig(), WriterOptions{BatchBytes: 100})
	if err != nil {
		t.Fatal(err)
	}
	for i := range int64(10) {
		if err := w.WriteViews(testKey(i), i, 0, testImage(8, 8, 3, i, 0, 1), testImage(8, 8, 3, i, 0, 2)); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	if _, err := w.Close(); !errors.Is(err, context.Canceled) {
		t.Errorf("Close = %v, want context.Canceled", err)
	}
	if ok, err := storage.Exists(context.Background(), storage.Join(dir, w.Path())); ok || err != nil {
		t.Errorf("a cancelled shard exists on GCS: %v, %v", ok, err)
	}
}

func TestListTreeOnEveryScheme(t *testing.T) {
	ctx := context.Background()
	roots := map[string]func(t *testing.T) string{
		"local": func(t *testing.T) string { return t.TempDir() },
		"mem":   func(t *testing.T) string { return "memfs://" + strings.ReplaceAll(t.Name(), "/", "_") },
		"gcs":   func(t *testing.T) string { return gcstest.Start(t, "tree") + "/root" },
	}
	for name, root := range roots {
		t.Run(name, func(t *testing.T) {
			dir := root(t)
			want := []string{"a.json", "pass-000/part-1.parquet", "pass-001/x/deep.bin"}
			for _, f := range want {
				if err := storage.WriteFile(ctx, storage.Join(dir, strings.Split(f, "/")...), []byte(f)); err != nil {
					t.Fatal(err)
				}
			}
			// A sibling whose name starts like dir is not under it.
			if err := storage.WriteFile(ctx, dir+"-sibling", []byte("no")); err != nil {
				t.Fatal(err)
			}
			got, err := storage.ListTree(ctx, dir)
			if err != nil || !slices.Equal(got, want) {
				t.Errorf("ListTree = %v, %v; want %v", got, err, want)
			}
			r, err := storage.Open(ctx, storage.Join(dir, "a.json"))
			if err != nil {
				t.Fatal(err)
			}
			data, _ := io.ReadAll(r)
			r.Close()
			if string(data) != "a.json" {
				t.Errorf("read back %q", data)
			}
		})
	}
	if got, err := storage.ListTree(ctx, t.TempDir()+"/missing"); err != nil || len(got) != 0 {
		t.Errorf("ListTree of a missing folder = %v, %v", got, err)
	}
}
