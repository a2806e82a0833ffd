package shards

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/dcl-beam/dcl-beam/internal/storage"
)

func TestWriteCommitVerifyRoundTrip(t *testing.T) {
	for _, enc := range []Encoding{Raw, PNG, JPEG} {
		t.Run(string(enc), func(t *testing.T) {
			dir := t.TempDir()
			cfg := testConfig()
			cfg.Encoding = enc
			m := writeDataset(t, dir, cfg, 24, WriterOptions{RowGroupBytes: 1500, BatchBytes: 400})
			if m.Rows != 48 || len(m.Shards) != 6 {
				t.Fatalf("manifest: %d rows in %d shards, want 48 in 6", m.Rows, len(m.Shards))
			}
			if len(m.Shards[0].RowGroups) < 2 {
				t.Errorf("row groups %v: want the small RowGroupBytes to cut several", m.Shards[0].RowGroups)
			}
			sum, err := Verify(context.Background(), dir)
			if err != nil || !sum.OK {
				t.Fatalf("Verify = %+v, %v", sum, err)
			}
			if sum.Rows != 48 || sum.Views != 96 || sum.Shards != 6 {
				t.Errorf("summary %+v: want 48 rows, 96 views, 6 shards", sum)
			}
			want := map[int32]int64{}
			for i := range int64(24) {
				want[testLabel(i)] += 2
			}
			if !mapsEqual(sum.Labels, want) {
				t.Errorf("labels %v, want %v", sum.Labels, want)
			}
		})
	}
}

func mapsEqual(a, b map[int32]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestShardFooterAndColumns(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig()
	writeDataset(t, dir, cfg, 10, WriterOptions{})
	p := filepath.Join(dir, "pass-001", "part-00002-of-00003.parquet")
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	f, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{
		DatasetKey: "synthetic", SplitKey: "train", PresetKey: "simclr-cifar", SeedKey: "7",
		SourceChecksumKey: "sha256:0000", CodeVersionKey: "test", PassKey: "1", PartKey: "2",
		FormatKey: "1", AugmentKey: `{"crop":{"size":8,"scale":[0.08,1]},"flip":0.5}`,
	} {
		if got, _ := f.Lookup(key); got != want {
			t.Errorf("footer %s = %q, want %q", key, got, want)
		}
	}
	// Image columns carry no statistics: the images would be copied into the footer.
	for _, rg := range f.Metadata().RowGroups {
		for _, col := range rg.Columns {
			name := strings.Join(col.MetaData.PathInSchema, ".")
			st := col.MetaData.Statistics
			hasStats := len(st.MinValue) > 0 || len(st.MaxValue) > 0 || len(st.Min) > 0 || len(st.Max) > 0
			if slices.Contains(viewColumns, name) && hasStats {
				t.Errorf("column %s has statistics", name)
			}
			if col.MetaData.BloomFilterOffset != 0 {
				t.Errorf("column %s has a bloom filter", name)
			}
		}
	}
	rows, err := parquet.Read[Row](bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	want := []int64{2, 5, 8}
	var got []int64
	for _, r := range rows {
		got = append(got, r.Index)
		if r.Pass != 1 || r.Encoding != "raw" || r.Height != 8 || len(r.View1) != 192 || len(r.View2) != 192 {
			t.Errorf("row %+v", r.Key)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("source indices %v, want %v", got, want)
	}
}

// The same rows written twice give byte-identical shards and manifests.
func TestWriterIsDeterministic(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	cfg := testConfig()
	cfg.Encoding = JPEG
	writeDataset(t, a, cfg, 30, WriterOptions{RowGroupBytes: 2000})
	writeDataset(t, b, cfg, 30, WriterOptions{RowGroupBytes: 2000})
	files, err := storage.ListTree(context.Background(), a)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 7 {
		t.Fatalf("files %v, want 6 shards and a manifest", files)
	}
	for _, f := range files {
		x, _ := os.ReadFile(filepath.Join(a, f))
		y, _ := os.ReadFile(filepath.Join(b, f))
		if !bytes.Equal(x, y) {
			t.Errorf("%s differs between two identical runs", f)
		}
	}
}

func TestWriterRefusesBadRows(t *testing.T) {
	cfg := testConfig()
	good := func() Row {
		return Row{Key: "k", Index: 1, Label: 0, Pass: 0, View1: make([]byte, 192), View2: make([]byte, 192),
			Height: 8, Width: 8, Channels: 3, Encoding: "raw"}
	}
	tests := []struct {
		name   string
		change func(*Row)
		want   string
	}{
		{"no key", func(r *Row) { r.Key = "" }, "no key"},
		{"label", func(r *Row) { r.Label = -2 }, "label -2"},
		{"pass", func(r *Row) { r.Pass = 1 }, "pass 1 written to a shard of pass 0"},
		{"size", func(r *Row) { r.Height = 9 }, "views are 9x8x3"},
		{"encoding", func(r *Row) { r.Encoding = "png" }, `encoding "png"`},
		{"missing view 2", func(r *Row) { r.View2 = nil }, "view 2 is empty"},
		{"short raw view", func(r *Row) { r.View1 = r.View1[:10] }, "raw views of 10"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			w, err := NewWriter(context.Background(), dir, ShardID{Pass: 0, Part: 0, Parts: 3}, cfg, WriterOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Write(good()); err != nil {
				t.Fatal(err)
			}
			r := good()
			tt.change(&r)
			err = w.Write(r)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Write = %v, want %q", err, tt.want)
			}
			if _, err := w.Close(); err == nil {
				t.Errorf("Close after a failed Write succeeded")
			}
			assertNoFiles(t, dir)
		})
	}
}

func TestWriterAbortAndCancelLeaveNothing(t *testing.T) {
	cfg := testConfig()
	write := func(t *testing.T, ctx context.Context, dir string) *Writer {
		w, err := NewWriter(ctx, dir, ShardID{Pass: 0, Part: 1, Parts: 3}, cfg, WriterOptions{BatchBytes: 100})
		if err != nil {
			t.Fatal(err)
		}
		for i := range int64(20) {
			if err := w.WriteViews(testKey(i), i, 0, testImage(8, 8, 3, i, 0, 1), testImage(8, 8, 3, i, 0, 2)); err != nil {
				return w
			}
		}
		return w
	}
	t.Run("abort", func(t *testing.T) {
		dir := t.TempDir()
		w := write(t, context.Background(), dir)
		w.Abort()
		w.Abort()
		if _, err := w.Close(); err == nil {
			t.Error("Close after Abort succeeded")
		}
		assertNoFiles(t, dir)
	})
	t.Run("cancelled context", func(t *testing.T) {
		dir := t.TempDir()
		ctx, cancel := context.WithCancel(context.Background())
		w := write(t, ctx, dir)
		cancel()
		_, err := w.Close()
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Close with a cancelled context = %v, want context.Canceled", err)
		}
		assertNoFiles(t, dir)
	})
}

func assertNoFiles(t *testing.T, dir string) {
	t.Helper()
	files, err := storage.ListTree(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) > 0 {
		t.Errorf("files left behind: %v", files)
	}
}

func TestEmptyShard(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig()
	cfg.Parts = 5
	m := writeDataset(t, dir, cfg, 3, WriterOptions{}) // parts 3 and 4 get no rows
	if s := m.Shards[4]; s.Rows != 0 || len(s.RowGroups) != 0 || s.Bytes == 0 {
		t.Errorf("empty shard entry %+v", s)
	}
	if sum, err := Verify(context.Background(), dir); err != nil {
		t.Fatalf("Verify = %+v, %v", sum, err)
	}
	js, _ := json.Marshal(m.Shards[4])
	if !strings.Contains(string(js), `"labels":{}`) {
		t.Errorf("empty shard JSON %s: want labels {}", js)
	}
}
