package pipelines

import (
	"context"
	"image/png"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/analysis"
	"github.com/dcl-beam/dcl-beam/shards/embeddings"
)

// pairSet writes n view pairs (each row view 1 then view 2, dim values each) and returns the
// two views.
func pairSet(t *testing.T, path string, n, dim int, meta map[string]string) (z1, z2 analysis.Vectors) {
	t.Helper()
	a := clustered(7, "v1", n, dim, 4)
	b := clustered(8, "v2", n, dim, 4)
	rows := analysis.LabeledVectors{Source: path, Vectors: analysis.Vectors{Dim: 2 * dim}, Labels: a.Labels}
	for i := range n {
		v1 := a.Vectors.Row(i)
		v2 := make([]float32, dim)
		for d := range v2 {
			v2[d] = v1[d] + 0.5*b.Vectors.Row(i)[d] // a noisy second view
		}
		rows.Vectors.Data = append(rows.Vectors.Data, v1...)
		rows.Vectors.Data = append(rows.Vectors.Data, v2...)
		z2.Data = append(z2.Data, v2...)
	}
	z1 = a.Vectors
	z2.Dim = dim
	writeEmbeddings(t, path, rows, 3, meta)
	return z1, z2
}

func TestNPCPipelineMatchesAnalysis(t *testing.T) {
	dir := t.TempDir()
	pairs := filepath.Join(dir, "pairs")
	z1, z2 := pairSet(t, pairs, 200, 6, map[string]string{embeddings.MetaViews: "2", embeddings.MetaTemperature: "0.2"})
	out := filepath.Join(dir, "npc")
	ctx := context.Background()
	job, err := PlanNPC(ctx, NPCOptions{Embeddings: pairs, BatchSizes: []int{64, 8, 32}, Seed: 4, Passes: 2, Bins: 10, Output: out})
	if err != nil {
		t.Fatal(err)
	}
	if job.Opts.Temperature != 0.2 || job.Pairs != 200 || job.Dim != 6 {
		t.Fatalf("plan %+v", job)
	}
	got, err := RunNPC(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	want, err := analysis.NPCStatistics(z1, z2, "pairs", analysis.NPCConfig{BatchSizes: []int{8, 32, 64}, Temperature: 0.2, Seed: 4, Passes: 2, Bins: 10})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Stats, want) {
		t.Errorf("pipeline statistics\n%+v\nanalysis.NPCStatistics\n%+v", got.Stats, want)
	}
	if got.Name != "τ=0.2" || got.Pairs != 200 || got.Source != pairs {
		t.Errorf("report header %+v", got)
	}
	for _, name := range []string{NPCSummaryPlotName, NPCDistPlotName} {
		f, err := os.Open(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := png.Decode(f); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		f.Close()
	}
	md, err := os.ReadFile(filepath.Join(out, NPCTableName))
	if err != nil || !strings.Contains(string(md), "| τ=0.2  |         32 |") {
		t.Errorf("npc.md: %v\n%s", err, md)
	}
}

func TestNPCPlanErrors(t *testing.T) {
	dir := t.TempDir()
	single := filepath.Join(dir, "pairs.parquet")
	pairSet(t, single, 50, 4, nil)
	oneView := filepath.Join(dir, "one-view")
	writeEmbeddings(t, oneView, clustered(9, "x", 50, 8, 3), 2, map[string]string{embeddings.MetaViews: "1"})
	pairs := filepath.Join(dir, "pairs")
	pairSet(t, pairs, 50, 4, map[string]string{embeddings.MetaViews: "2"})
	noMeta := filepath.Join(dir, "no-meta")
	pairSet(t, noMeta, 50, 4, nil)
	tests := []struct {
		o    NPCOptions
		want string
	}{
		{NPCOptions{Embeddings: single, Temperature: 0.1}, "pass --concatenated"},
		{NPCOptions{Embeddings: oneView, Temperature: 0.1}, `not view pairs (metadata views="1")`},
		{NPCOptions{Embeddings: noMeta, Temperature: 0.1}, `not view pairs (metadata views="")`},
		{NPCOptions{Embeddings: pairs}, "records no training temperature"},
		{NPCOptions{Embeddings: pairs, Temperature: 0.1, BatchSizes: []int{32, 64}}, "batch size 64: want 2 to the 50 view pairs"},
		{NPCOptions{Embeddings: single, Temperature: 0.1, Concatenated: true, BatchSizes: []int{1}}, "batch size 1"},
	}
	for _, tt := range tests {
		tt.o.Output = filepath.Join(dir, "out")
		_, err := PlanNPC(context.Background(), tt.o)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: error %v, want %q", tt.o, err, tt.want)
		}
	}
}

// TestNPCDefaultBatchSizesFitTheData: with the default batch sizes a set of 100 view pairs
// is sampled at the sizes it allows, and the others are named as left out; sizes asked for
// explicitly must fit.
func TestNPCDefaultBatchSizesFitTheData(t *testing.T) {
	dir := t.TempDir()
	pairs := filepath.Join(dir, "pairs")
	pairSet(t, pairs, 100, 4, map[string]string{embeddings.MetaViews: "2"})
	job, err := PlanNPC(context.Background(), NPCOptions{Embeddings: pairs, Temperature: 0.1, Output: filepath.Join(dir, "out")})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(job.Opts.BatchSizes, []int{32, 64}) || !slices.Equal(job.LeftOut, []int{128, 256, 512, 1024}) {
		t.Errorf("batch sizes %v, left out %v; want 32, 64 and 128…1024", job.Opts.BatchSizes, job.LeftOut)
	}
	_, err = PlanNPC(context.Background(), NPCOptions{Embeddings: pairs, Temperature: 0.1, BatchSizes: []int{32, 128}, Output: filepath.Join(dir, "out")})
	if err == nil || !strings.Contains(err.Error(), "batch size 128: want 2 to the 100 view pairs") {
		t.Errorf("an explicit batch size over the pairs: %v", err)
	}
	small := filepath.Join(dir, "small")
	pairSet(t, small, 20, 4, map[string]string{embeddings.MetaViews: "2"})
	if _, err := PlanNPC(context.Background(), NPCOptions{Embeddings: small, Temperature: 0.1, Output: filepath.Join(dir, "out")}); err == nil ||
		!strings.Contains(err.Error(), "fewer than the smallest default batch size 32") {
		t.Errorf("pairs fewer than every default size: %v", err)
	}
}
