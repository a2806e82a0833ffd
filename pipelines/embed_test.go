package pipelines

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/dcl-beam/dcl-beam/gpu"
	"github.com/dcl-beam/dcl-beam/internal/testing/encodertest"
	"github.com/dcl-beam/dcl-beam/shards/embeddings"
	"github.com/dcl-beam/dcl-beam/trainstep"
	"github.com/dcl-beam/dcl-beam/transforms"
)

// pairClasses is the class list of writePairShards' datasets.
var pairClasses = encodertest.PairClasses

func writePairShards(t testing.TB, dir string, n, size, views, passes, parts int) {
	t.Helper()
	encodertest.WritePairShards(t, dir, n, size, views, passes, parts)
}

func pairImage(i, pass, v, size int) transforms.Image { return encodertest.PairImage(i, pass, v, size) }

func trainTinyEncoder(t testing.TB, data string) string {
	t.Helper()
	return encodertest.TrainTinyEncoder(t, data)
}

// wantEmbeddings embeds every image of one pass directly with the encoder: source index →
// vector (views concatenated).
func wantEmbeddings(t testing.TB, run string, n, pass, views int, feature trainstep.Feature) map[int64][]float32 {
	t.Helper()
	ctx := context.Background()
	backend, err := gpu.New(ctx, gpu.Options{Kind: gpu.CPU, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Finalize()
	enc, err := trainstep.LoadEncoder(ctx, backend, run)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	want := map[int64][]float32{}
	for i := range n {
		var v []float32
		for view := 1; view <= views; view++ {
			out, err := enc.Embed([]transforms.Image{pairImage(i, pass, view, 8)}, feature)
			if err != nil {
				t.Fatal(err)
			}
			v = append(v, out[0]...)
		}
		want[int64(i)] = v
	}
	return want
}

func TestEmbedPipelineMatchesTheEncoder(t *testing.T) {
	ctx := context.Background()
	data := t.TempDir()
	const n = 37
	writePairShards(t, data, n, 8, 2, 2, 3)
	run := trainTinyEncoder(t, data)

	tests := []struct {
		name   string
		o      EmbedOptions
		rows   int64
		dim    int
		files  int
		pass   int
		single bool
	}{
		{"backbone, view 1, pass 0, a directory", EmbedOptions{Feature: trainstep.Backbone, Views: 1, Pass: 0, BatchSize: 8, Parts: 3}, n, 16, 3, 0, false},
		{"projection pairs, pass 1, one file", EmbedOptions{Feature: trainstep.Projection, Views: 2, Pass: 1, BatchSize: 16, Parts: 2}, n, 16, 1, 1, true},
		{"every pass", EmbedOptions{Feature: trainstep.Backbone, Views: 1, Pass: -1, BatchSize: 32}, 2 * n, 16, 2, -1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.o
			o.Checkpoint, o.Data = run, data
			o.Output = filepath.Join(t.TempDir(), "emb")
			if tt.single {
				o.Output += ".parquet"
			}
			job, err := PlanEmbed(ctx, o)
			if err != nil {
				t.Fatal(err)
			}
			res, err := RunEmbed(ctx, job)
			if err != nil {
				t.Fatal(err)
			}
			if res.Rows != tt.rows || res.Dim != tt.dim || res.Files != tt.files {
				t.Fatalf("result %+v, want %d rows of %d values in %d files", res, tt.rows, tt.dim, tt.files)
			}
			got, ids, err := LoadEmbeddings(ctx, o.Output)
			if err != nil {
				t.Fatal(err)
			}
			set, err := inspectEmbeddings(ctx, o.Output)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(set.Classes, pairClasses) {
				t.Errorf("the embeddings carry classes %q, want the shards' %q", set.Classes, pairClasses)
			}
			// Each row says what it is: its example's key, split and class name.
			for _, f := range set.Files {
				rows, err := parquet.ReadFile[embeddings.Row](f.Path)
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range rows {
					if r.Key != fmt.Sprintf("k%03d", r.ID) || r.Split != "train" || r.Class != pairClasses[r.Label] {
						t.Fatalf("%s: row %+v: want key k%03d, split train, class %s", f.Path, r, r.ID, pairClasses[r.Label])
					}
				}
			}
			if tt.pass < 0 {
				counts := map[int64]int{}
				for _, id := range ids {
					counts[id]++
				}
				for i := range int64(n) {
					if counts[i] != 2 {
						t.Errorf("image %d embedded %d times over 2 passes", i, counts[i])
					}
				}
				return
			}
			want := wantEmbeddings(t, run, n, tt.pass, o.Views, o.Feature)
			seen := map[int64]bool{}
			for r, id := range ids {
				w, ok := want[id]
				if !ok || seen[id] {
					t.Fatalf("row %d: id %d unknown or repeated", r, id)
				}
				seen[id] = true
				if got.Labels[r] != int32(id%3) {
					t.Errorf("id %d: label %d, want %d", id, got.Labels[r], id%3)
				}
				for d, v := range got.Vectors.Row(r) {
					if math.Abs(float64(v-w[d])) > 1e-4*(1+math.Abs(float64(w[d]))) {
						t.Fatalf("id %d value %d: %v, the encoder gives %v", id, d, v, w[d])
					}
				}
			}
			if !tt.single {
				return
			}
			if _, err := os.Stat(partsDir(o.Output)); !os.IsNotExist(err) {
				t.Errorf("the part files' folder of a single-file output was left behind: %v", err)
			}
			// The pairs feed the NPC pipeline as they are: the file's footer says they are
			// pairs and gives the temperature, as a directory's embeddings.json would.
			npc, err := PlanNPC(ctx, NPCOptions{Embeddings: o.Output, Output: t.TempDir(), BatchSizes: []int{8}})
			if err != nil {
				t.Fatalf("a single file's pairs, without --concatenated or --temperature: %v", err)
			}
			if want := job.Meta[embeddings.MetaTemperature]; npc.Opts.Temperature == 0 || strconv.FormatFloat(npc.Opts.Temperature, 'g', -1, 64) != want {
				t.Errorf("temperature %v, the footer says %s", npc.Opts.Temperature, want)
			}
		})
	}
}

func TestEmbedPlanErrors(t *testing.T) {
	ctx := context.Background()
	pairs, singles := t.TempDir(), t.TempDir()
	writePairShards(t, pairs, 12, 8, 2, 1, 1)
	writePairShards(t, singles, 12, 8, 1, 1, 1)
	run := trainTinyEncoder(t, pairs)
	big := t.TempDir()
	writePairShards(t, big, 4, 72, 1, 1, 1) // 72×72: more than the MLP takes
	tests := []struct {
		o    EmbedOptions
		want string
	}{
		{EmbedOptions{Checkpoint: run, Data: singles, Views: 2}, "--views=2 needs view pairs"},
		{EmbedOptions{Checkpoint: run, Data: pairs, Pass: 3}, "pass 3"},
		{EmbedOptions{Checkpoint: run, Data: pairs, Feature: "logits"}, `feature "logits"`},
		{EmbedOptions{Checkpoint: run, Data: big}, "72x72"},
		{EmbedOptions{Checkpoint: filepath.Join(t.TempDir(), "none"), Data: pairs}, "none"},
		{EmbedOptions{Checkpoint: run, Data: pairs, Precision: "fp8"}, `--precision: precision "fp8"`},
	}
	for _, tt := range tests {
		tt.o.Output = filepath.Join(t.TempDir(), "emb")
		_, err := PlanEmbed(ctx, tt.o)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: error %v, want %q", tt.o, err, tt.want)
		}
	}
}
