package pipelines

import (
	"context"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/analysis"
	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/shards/embeddings"
)

func TestLinearPipelineMatchesAnalysis(t *testing.T) {
	dir := t.TempDir()
	train := clustered(11, "train", 400, 8, 4)
	test := clustered(12, "test", 100, 8, 4)
	trainDir, testFile := filepath.Join(dir, "train"), filepath.Join(dir, "test.parquet")
	writeEmbeddings(t, trainDir, train, 3, map[string]string{embeddings.MetaDataset: "cifar10"})
	writeEmbeddings(t, testFile, test, 1, nil)
	cfg := analysis.DefaultLinearConfig()
	cfg.Epochs, cfg.Milestones, cfg.LR, cfg.Seed = 5, []int{3, 4}, 0.5, 3
	ctx := context.Background()
	job, err := PlanLinear(ctx, LinearOptions{Train: trainDir, Test: testFile, Config: cfg, Model: filepath.Join(dir, "model.json")})
	if err != nil {
		t.Fatal(err)
	}
	if job.Opts.Config.NumClasses != 10 { // from the dataset named in the metadata
		t.Errorf("classes %d, want CIFAR-10's 10", job.Opts.Config.NumClasses)
	}
	got, err := RunLinear(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	cfg.NumClasses = 10
	want, wantModel, err := analysis.LinearProbe(train, test, cfg)
	if err != nil {
		t.Fatal(err)
	}
	want.PerClass = nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("pipeline %+v\nanalysis.LinearProbe %+v", got, want)
	}
	var model analysis.LinearModel
	if err := storage.LoadJSON(ctx, filepath.Join(dir, "model.json"), &model); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&model, wantModel) {
		t.Error("the saved model differs from analysis.LinearProbe's")
	}
}

func TestLinearPipelineErrors(t *testing.T) {
	dir := t.TempDir()
	train := clustered(13, "train", 60, 4, 3)
	test := clustered(14, "test", 20, 4, 3)
	test.Labels[9] = 5
	trainFile, testFile := filepath.Join(dir, "train.parquet"), filepath.Join(dir, "test.parquet")
	writeEmbeddings(t, trainFile, train, 1, nil)
	writeEmbeddings(t, testFile, test, 1, nil)
	cfg := analysis.DefaultLinearConfig()
	cfg.Epochs, cfg.NumClasses = 1, 3
	ctx := context.Background()
	job, err := PlanLinear(ctx, LinearOptions{Train: trainFile, Test: testFile, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	_, err = RunLinear(ctx, job)
	if err == nil || !strings.Contains(err.Error(), testFile) || !strings.Contains(err.Error(), "row 9: label 5 outside [0, 3)") {
		t.Errorf("label outside the classes: %v", err)
	}
	cfg.Optimizer = "adam"
	if _, err := PlanLinear(ctx, LinearOptions{Train: trainFile, Test: testFile, Config: cfg}); err == nil || !strings.Contains(err.Error(), `optimizer "adam"`) {
		t.Errorf("bad optimizer: %v", err)
	}
}

// cropPasses gives the k-th row of each image to pass k, and refuses embeddings that are not
// every pass of one augmented dataset, naming the file.
func TestCropPassesSplitsByImage(t *testing.T) {
	all := analysis.LabeledVectors{Source: "crops.parquet", Vectors: analysis.Vectors{Dim: 1, Data: []float32{10, 20, 11, 21}}, Labels: []int32{0, 1, 0, 1}}
	passes, err := cropPasses(all, []int64{7, 8, 7, 8}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(passes) != 2 || !slices.Equal(passes[0].Vectors.Data, []float32{10, 20}) || !slices.Equal(passes[1].Vectors.Data, []float32{11, 21}) ||
		!slices.Equal(passes[1].Labels, []int32{0, 1}) {
		t.Errorf("passes %+v", passes)
	}
	// View pairs: each row's halves are two passes.
	pairs := analysis.LabeledVectors{Source: "pairs.parquet", Vectors: analysis.Vectors{Dim: 2, Data: []float32{10, 11, 20, 21, 12, 13, 22, 23}}, Labels: []int32{0, 1, 0, 1}}
	four, err := cropPasses(pairs, []int64{7, 8, 7, 8}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(four) != 4 || !slices.Equal(four[1].Vectors.Data, []float32{11, 21}) || !slices.Equal(four[2].Vectors.Data, []float32{12, 22}) || four[3].Vectors.Dim != 1 {
		t.Errorf("passes of view pairs %+v", four)
	}
	for _, c := range []struct {
		ids  []int64
		want string
	}{
		{[]int64{7, 8, 9, 10}, "crops.parquet holds one crop of each image: crops=augmented needs"},
		{[]int64{7, 8, 7, 7}, "crops.parquet: image 8 has 1 crops, others 3"},
	} {
		if _, err := cropPasses(all, c.ids, 1); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ids %v: %v, want %q", c.ids, err, c.want)
		}
	}
}
