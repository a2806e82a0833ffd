package shards

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/dcl-beam/dcl-beam/internal/storage"
)

// Each case damages a good dataset in one way; Verify must report exactly that.
func TestVerifyFindsWhatIsWrong(t *testing.T) {
	shard := ShardID{Pass: 1, Part: 0, Parts: 3}.Path()
	tests := []struct {
		name   string
		damage func(t *testing.T, dir string, m *Manifest)
		want   string // in the problem list
	}{
		{"truncated shard", func(t *testing.T, dir string, m *Manifest) {
			p := filepath.Join(dir, shard)
			data, _ := os.ReadFile(p)
			os.WriteFile(p, data[:len(data)-100], 0o644)
		}, "not a readable Parquet file"},
		{"checksum mismatch", func(t *testing.T, dir string, m *Manifest) {
			// One pixel changes: the file still parses, only the checksum can tell.
			p := filepath.Join(dir, shard)
			data, _ := os.ReadFile(p)
			i := len(data) / 3
			data[i] ^= 0x01
			os.WriteFile(p, data, 0o644)
		}, "sha256"},
		{"listed shard missing", func(t *testing.T, dir string, m *Manifest) {
			os.Remove(filepath.Join(dir, shard))
		}, "listed in the manifest but missing"},
		{"extra unlisted shard", func(t *testing.T, dir string, m *Manifest) {
			data, _ := os.ReadFile(filepath.Join(dir, shard))
			os.WriteFile(filepath.Join(dir, "pass-001", "part-00003-of-00003.parquet"), data, 0o644)
		}, "not listed in the manifest"},
		{"shard of another run in its place", func(t *testing.T, dir string, m *Manifest) {
			// Same rows, another seed: the sizes and checksum are patched into the manifest,
			// so only the footer's provenance shows it.
			other := t.TempDir()
			cfg := testConfig()
			cfg.Seed = 8
			om := writeDataset(t, other, cfg, 30, WriterOptions{})
			data, _ := os.ReadFile(filepath.Join(other, shard))
			os.WriteFile(filepath.Join(dir, shard), data, 0o644)
			for i := range m.Shards {
				if m.Shards[i].Path == shard {
					for _, s := range om.Shards {
						if s.Path == shard {
							m.Bytes += s.Bytes - m.Shards[i].Bytes
							m.Shards[i] = s
						}
					}
				}
			}
			if err := WriteManifest(context.Background(), dir, m); err != nil {
				t.Fatal(err)
			}
		}, "footer provenance differs from the manifest: [seed: 8 != 7]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			m := writeDataset(t, dir, testConfig(), 30, WriterOptions{})
			if sum, err := Verify(context.Background(), dir); err != nil || !sum.OK {
				t.Fatalf("the undamaged dataset fails: %v", err)
			}
			tt.damage(t, dir, m)
			sum, err := Verify(context.Background(), dir)
			if err == nil || sum.OK {
				t.Fatalf("Verify of a damaged dataset = %+v, nil", sum)
			}
			found := false
			for _, p := range sum.Problems {
				if strings.Contains(p.Problem, tt.want) {
					found = true
				}
			}
			js, _ := json.Marshal(sum)
			if !found {
				t.Errorf("problems %s: want one containing %q", js, tt.want)
			}
			if !strings.Contains(string(js), `"ok":false,"problems":[`) {
				t.Errorf("summary JSON %s", js)
			}
		})
	}
}

func TestVerifySummaryJSON(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig()
	cfg.Passes = 1
	writeDataset(t, dir, cfg, 7, WriterOptions{})
	// A temporary left by an interrupted write is not data: ignored.
	os.WriteFile(filepath.Join(dir, "pass-000", "part-00001-of-00003.parquet"+storage.TempMarker+"42"), []byte("half"), 0o644)
	sum, err := Verify(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	js, _ := json.Marshal(sum)
	want := `{"shards":3,"rows":7,"views":14,"labels":{"-1":1,"0":2,"1":1,"2":1,"3":1,"4":1},"ok":true}`
	if string(js) != want {
		t.Errorf("summary %s\nwant    %s", js, want)
	}
}

func TestVerifyWithoutManifest(t *testing.T) {
	dir := t.TempDir()
	writeDataset(t, dir, testConfig(), 5, WriterOptions{})
	os.Remove(filepath.Join(dir, ManifestName))
	sum, err := Verify(context.Background(), dir)
	if !errors.Is(err, ErrNoManifest) || sum.OK || len(sum.Problems) != 1 {
		t.Errorf("Verify without a manifest = %+v, %v", sum, err)
	}
}

func TestReadManifestRefusesBadManifests(t *testing.T) {
	dir := t.TempDir()
	good := writeDataset(t, dir, testConfig(), 12, WriterOptions{})
	tests := []struct {
		name   string
		change func(m map[string]any)
		want   string
	}{
		{"other format version", func(m map[string]any) { m["format"] = 2 }, "manifest format version 2, this program reads version 1"},
		{"no format version", func(m map[string]any) { delete(m, "format") }, "no format version"},
		{"duplicate shard", func(m map[string]any) {
			s := m["shards"].([]any)
			s[1] = s[0]
		}, "lists shard pass-000/part-00000-of-00003.parquet twice"},
		{"missing shard", func(m map[string]any) {
			m["shards"] = m["shards"].([]any)[1:]
		}, "lists 5 shards, want 2 passes × 3 parts = 6"},
		{"missing config field", func(m map[string]any) {
			delete(m["config"].(map[string]any), "dataset")
		}, "dataset is missing"},
		{"missing checksum", func(m map[string]any) {
			delete(m["shards"].([]any)[2].(map[string]any), "sha256")
		}, "sha256 is missing"},
		{"totals do not add up", func(m map[string]any) { m["rows"] = 1 }, "totals 1 rows"},
		{"records do not add up", func(m map[string]any) { m["records"] = 13 }, "13 records less 0 dead letters is 13"},
		{"unknown field", func(m map[string]any) { m["extra"] = true }, `unknown field "extra"`},
		{"fewer classes than labels", func(m map[string]any) {
			m["config"].(map[string]any)["classes"] = []string{"only"}
		}, "but the config names 1 classes"},
		{"a class named twice", func(m map[string]any) {
			m["config"].(map[string]any)["classes"] = []string{"a", "b", "a", "c"}
		}, `classes 0 and 2 are both named "a"`},
		{"not JSON", nil, "not valid JSON"},
	}
	orig, err := good.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := []byte("{not json")
			if tt.change != nil {
				var m map[string]any
				json.Unmarshal(orig, &m)
				tt.change(m)
				data, _ = json.Marshal(m)
			}
			if err := os.WriteFile(filepath.Join(dir, ManifestName), data, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := ReadManifest(context.Background(), dir)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), ManifestName) {
				t.Errorf("ReadManifest = %v, want an error naming the file and saying %q", err, tt.want)
			}
		})
	}
	os.WriteFile(filepath.Join(dir, ManifestName), orig, 0o644)
	if _, err := ReadManifest(context.Background(), dir); err != nil {
		t.Errorf("the original manifest: %v", err)
	}
}

func TestPrepareRefusesADifferentDataset(t *testing.T) {
	ctx := context.Background()
	cfg := testConfig()
	other := testConfig()
	other.Seed = 99
	other.Augment = json.RawMessage(`{"crop": {"size": 8, "scale": [0.2, 1]}, "flip": 0.5}`)

	t.Run("complete dataset", func(t *testing.T) {
		dir := t.TempDir()
		writeDataset(t, dir, cfg, 6, WriterOptions{})
		err := Prepare(ctx, dir, other, false)
		var dd *DifferentDatasetError
		if !errors.As(err, &dd) || !strings.Contains(err.Error(), "seed: 7 != 99") || !strings.Contains(err.Error(), "augment") {
			t.Fatalf("Prepare over another dataset = %v", err)
		}
		if _, err := ReadManifest(ctx, dir); err != nil {
			t.Errorf("a refused Prepare damaged the dataset: %v", err)
		}
		// The same configuration, with the augmentation JSON spelled differently, is the
		// same dataset: a re-run.
		same := cfg
		same.Augment = json.RawMessage(`{"crop":{"size":8,"scale":[0.08,1]},"flip":0.5}`)
		if err := Prepare(ctx, dir, same, false); err != nil {
			t.Errorf("Prepare for the same dataset = %v", err)
		}
		assertNoFiles(t, dir)
	})
	t.Run("interrupted run", func(t *testing.T) {
		dir := t.TempDir()
		writeDataset(t, dir, cfg, 6, WriterOptions{})
		os.Remove(filepath.Join(dir, ManifestName))
		os.WriteFile(filepath.Join(dir, "pass-000", "part-00002-of-00003.parquet"+storage.TempMarker+"7"), []byte("x"), 0o644)
		if err := Prepare(ctx, dir, other, false); err == nil || !strings.Contains(err.Error(), "footer of pass-000/part-00000-of-00003.parquet") {
			t.Fatalf("Prepare over another run's shards = %v", err)
		}
		if err := Prepare(ctx, dir, cfg, false); err != nil {
			t.Fatalf("Prepare to finish the same run = %v", err)
		}
		assertNoFiles(t, dir)
	})
	t.Run("overwrite", func(t *testing.T) {
		dir := t.TempDir()
		writeDataset(t, dir, cfg, 6, WriterOptions{})
		os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o644)
		if err := Prepare(ctx, dir, other, true); err != nil {
			t.Fatalf("Prepare with overwrite = %v", err)
		}
		files, _ := storage.ListTree(ctx, dir)
		if len(files) != 1 || files[0] != "notes.txt" {
			t.Errorf("after an overwrite Prepare: %v, want only the user's notes.txt", files)
		}
		writeDataset(t, dir, other, 6, WriterOptions{})
		if _, err := Verify(ctx, dir); err != nil {
			t.Error(err)
		}
	})
}

// A killed run leaves shards without a manifest; re-running the same command gives the
// same directory, byte for byte, as an uninterrupted run.
func TestRerunAfterAKilledRun(t *testing.T) {
	ctx := context.Background()
	cfg := testConfig()
	clean, rerun := t.TempDir(), t.TempDir()
	writeDataset(t, clean, cfg, 20, WriterOptions{})

	// The killed run: two shards committed, one half-written temporary, no manifest.
	for part := range 2 {
		w, err := NewWriter(ctx, rerun, ShardID{Pass: 0, Part: part, Parts: 3}, cfg, WriterOptions{})
		if err != nil {
			t.Fatal(err)
		}
		w.WriteViews(testKey(int64(part)), int64(part), 0, testImage(8, 8, 3, int64(part), 0, 1), testImage(8, 8, 3, int64(part), 0, 2))
		if _, err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(rerun, "pass-001", "part-00000-of-00003.parquet"+storage.TempMarker+"1"), []byte("PAR1 half"), 0o644)
	if _, err := NewReader(ctx, rerun, ReaderOptions{BatchSize: 1}); !errors.Is(err, ErrNoManifest) {
		t.Fatalf("a killed run's directory was taken for data: %v", err)
	}

	writeDataset(t, rerun, cfg, 20, WriterOptions{})
	a, _ := storage.ListTree(ctx, clean)
	b, _ := storage.ListTree(ctx, rerun)
	if strings.Join(a, ",") != strings.Join(b, ",") {
		t.Fatalf("files %v after the re-run, want %v", b, a)
	}
	for _, f := range a {
		x, _ := os.ReadFile(filepath.Join(clean, f))
		y, _ := os.ReadFile(filepath.Join(rerun, f))
		if string(x) != string(y) {
			t.Errorf("%s differs from an uninterrupted run", f)
		}
	}
}

func TestCommitChecksItsShards(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cfg := testConfig()
	m := writeDataset(t, dir, cfg, 9, WriterOptions{})
	os.Remove(filepath.Join(dir, ManifestName))
	os.Remove(filepath.Join(dir, m.Shards[3].Path))
	if _, err := Commit(ctx, dir, cfg, m.Shards, 9, DeadLetters{}); err == nil || !strings.Contains(err.Error(), m.Shards[3].Path+" is missing") {
		t.Errorf("Commit with a missing shard = %v", err)
	}
	if _, err := Commit(ctx, dir, cfg, m.Shards[:5], 9, DeadLetters{}); err == nil {
		t.Errorf("Commit with a shard left out of the list succeeded")
	}
	if _, err := Commit(ctx, dir, cfg, m.Shards, 9, DeadLetters{Count: 1}); err == nil {
		t.Errorf("Commit whose counts do not add up succeeded")
	}
	if ok, _ := storage.Exists(ctx, filepath.Join(dir, ManifestName)); ok {
		t.Errorf("a failed Commit wrote a manifest")
	}
}

func TestDeadLettersAddUp(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cfg := testConfig()
	cfg.Passes = 1
	// 10 records read, 2 rejected: the shards hold the other 8.
	if err := Prepare(ctx, dir, cfg, false); err != nil {
		t.Fatal(err)
	}
	var infos []ShardInfo
	for part := range 3 {
		w, err := NewWriter(ctx, dir, ShardID{Pass: 0, Part: part, Parts: 3}, cfg, WriterOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := int64(part); i < 8; i += 3 {
			w.WriteViews(testKey(i), i, 0, testImage(8, 8, 3, i, 0, 1), testImage(8, 8, 3, i, 0, 2))
		}
		info, err := w.Close()
		if err != nil {
			t.Fatal(err)
		}
		infos = append(infos, info)
	}
	letters := []DeadLetter{{Source: "b.bin", Position: 9, Reason: "truncated record"}, {Source: "a.bin", Position: 8, Reason: "corrupt JPEG"}}
	dl, err := WriteDeadLetters(ctx, dir, letters)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Commit(ctx, dir, cfg, infos, 10, DeadLetters{}); err == nil || !strings.Contains(err.Error(), "10 records less 0 dead letters is 10") {
		t.Errorf("Commit without the dead letters = %v", err)
	}
	m, err := Commit(ctx, dir, cfg, infos, 10, dl)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadDeadLetters(ctx, dir, m)
	if err != nil || len(got) != 2 || got[0].Source != "a.bin" {
		t.Errorf("ReadDeadLetters = %+v, %v; want both, sorted", got, err)
	}
	if sum, err := Verify(ctx, dir); err != nil {
		t.Errorf("Verify = %+v, %v", sum, err)
	}
	os.Remove(filepath.Join(dir, DeadLettersName))
	if _, err := Verify(ctx, dir); err == nil || !strings.Contains(err.Error(), "dead-letter file") {
		t.Errorf("Verify without the dead-letter file = %v", err)
	}
}

// TestOverwriteRemovesOnlyDatasets: --overwrite into a directory of embeddings, or one with
// Parquet files at its top that are no dataset's shards, is refused and removes nothing.
func TestOverwriteRemovesOnlyDatasets(t *testing.T) {
	ctx := context.Background()
	for _, plant := range []string{"embeddings.json", "part-00000-of-00001.parquet"} {
		t.Run(plant, func(t *testing.T) {
			dir := t.TempDir()
			var buf bytes.Buffer
			if err := parquet.Write(&buf, []struct{ ID int64 }{{1}, {2}}); err != nil {
				t.Fatal(err)
			}
			files := map[string][]byte{"part-00000-of-00001.parquet": buf.Bytes(), plant: []byte(`{"format": 1}`)}
			if plant != "embeddings.json" {
				files = map[string][]byte{plant: buf.Bytes()}
			}
			for name, data := range files {
				if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			err := Prepare(ctx, dir, testConfig(), true)
			if err == nil || !strings.Contains(err.Error(), "--overwrite replaces a dataset only") {
				t.Errorf("Prepare with overwrite = %v", err)
			}
			for name, data := range files {
				if got, err := os.ReadFile(filepath.Join(dir, name)); err != nil || !bytes.Equal(got, data) {
					t.Errorf("%s was removed or changed: %v", name, err)
				}
			}
		})
	}
}
