package analysis

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/storage"
)

func sampleNPCReports(t *testing.T) []NPCReport {
	t.Helper()
	var reports []NPCReport
	for i, name := range []string{"InfoNCE τ=0.1", "DCL τ=0.1"} {
		var stats []NPCStats
		for _, size := range []int{32, 64, 128, 256} {
			var acc QAccumulator
			for j := range 200 {
				x := float64(j) / 200
				acc.Add(math.Pow(x, 1/(float64(size)/32*float64(i+1))))
			}
			stats = append(stats, acc.Stats(size, 3, 20))
		}
		reports = append(reports, NPCReport{Name: name, Source: "emb/pairs.parquet", Temperature: 0.1, Seed: 5, Pairs: 1000, Stats: stats})
	}
	return reports
}

func TestJSONRoundTrips(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	values := []struct {
		name string
		give any
		into any
	}{
		{"knn.json", &KNNResult{Top1: 91.25, Top5: 99.5, K: 200, Temperature: 0.1, Metric: Euclidean, NTrain: 10, NTest: 4, NumClasses: 2,
			PerClass: []ClassAccuracy{{Class: 0, N: 2, Top1: 50, Top5: 100}, {Class: 1, N: 2, Top1: 100, Top5: 100}}}, &KNNResult{}},
		{"linear.json", &LinearResult{Top1: 80, Top5: 95, NTrain: 5, NTest: 5, NumClasses: 3, Optimizer: LARS, Epochs: 2, BatchSize: 4, LR: 1.2, Seed: 7, TrainLoss: []float64{1.5, 0.25}}, &LinearResult{}},
		{"npc.json", &sampleNPCReports(t)[0], &NPCReport{}},
		{"model.json", &LinearModel{NumClasses: 2, Dim: 1, W: []float32{0.5, -1}, B: []float32{0, 0.125}, Mean: []float32{3}, Std: []float32{2}}, &LinearModel{}},
	}
	for _, v := range values {
		path := filepath.Join(dir, v.name)
		if err := storage.SaveJSON(ctx, path, v.give); err != nil {
			t.Fatal(err)
		}
		if err := storage.LoadJSON(ctx, path, v.into); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(v.give, v.into) {
			t.Errorf("%s: read back %+v, wrote %+v", v.name, v.into, v.give)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "knn.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"top1": 91.25`, `"top5": 99.5`, `"k": 200`, `"temperature": 0.1`, `"n_train": 10`, `"n_test": 4`, `"metric": "euclidean"`} {
		if !bytes.Contains(b, []byte(key)) {
			t.Errorf("knn.json lacks %s:\n%s", key, b)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "typo.json"), []byte(`{"top1": 1, "top_5": 2}`), 0o644); err != nil {
		t.Fatal(err)
	}
	err = storage.LoadJSON(ctx, filepath.Join(dir, "typo.json"), &KNNResult{})
	if err == nil || !strings.Contains(err.Error(), "typo.json") || !strings.Contains(err.Error(), "top_5") {
		t.Errorf("unknown field: %v", err)
	}
	if err := storage.LoadJSON(ctx, filepath.Join(dir, "missing.json"), &KNNResult{}); err == nil || !strings.Contains(err.Error(), "missing.json") {
		t.Errorf("missing file: %v", err)
	}
}

func TestSaveJSONOnMemfs(t *testing.T) {
	ctx := context.Background()
	want := sampleNPCReports(t)
	if err := storage.SaveJSON(ctx, "memfs://reports/npc.json", want); err != nil {
		t.Fatal(err)
	}
	var got []NPCReport
	if err := storage.LoadJSON(ctx, "memfs://reports/npc.json", &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Error("NPC reports changed through memfs")
	}
	if ok, _ := storage.Exists(ctx, "memfs://reports/npc.json"); !ok {
		t.Error("file missing")
	}
}

func TestMarkdownTable(t *testing.T) {
	tab := Table{Header: []string{"run", "top-1 %"}, RightAlign: []bool{false, true}, Rows: [][]string{{"dcl|b256", "81.20"}, {"infonce", "7.5"}}}
	want := "" +
		"| run       | top-1 % |\n" +
		"| --------- | ------: |\n" +
		"| dcl\\|b256 |   81.20 |\n" +
		"| infonce   |     7.5 |\n"
	if got := tab.Markdown(); got != want {
		t.Errorf("Markdown:\n%s\nwant:\n%s", got, want)
	}
	npc := NPCTable(sampleNPCReports(t)).Markdown()
	if lines := strings.Count(npc, "\n"); lines != 2+8 {
		t.Errorf("NPC table has %d lines, want 10:\n%s", lines, npc)
	}
	if !strings.Contains(npc, "| DCL τ=0.1     |        256 |") {
		t.Errorf("NPC table:\n%s", npc)
	}
	acc := AccuracyTable([]string{"a"}, []Accuracy{{Top1: 12.345, Top5: 50}}).Markdown()
	if !strings.Contains(acc, "| a   |   12.35 |   50.00 |") {
		t.Errorf("accuracy table:\n%s", acc)
	}
}
