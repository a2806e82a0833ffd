package experiments_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"

	"github.com/dcl-beam/dcl-beam/analysis"
	"github.com/dcl-beam/dcl-beam/experiments"
	"github.com/dcl-beam/dcl-beam/reproduce"
	"github.com/dcl-beam/dcl-beam/shards"
)

// TestMain initialises Beam (the scaled-down run's pipelines run on prism, in process).
func TestMain(m *testing.M) { ptest.Main(m) }

func loadGPUConfig(t *testing.T) *reproduce.Config {
	t.Helper()
	f, err := experiments.Open("fashion-mnist-gpu")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c, err := reproduce.Parse(f, "fashion-mnist-gpu.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestFashionMNISTGPUConfig checks the experiment is what it is for: Fashion-MNIST at
// 32 px, resnet18-cifar on CUDA, InfoNCE and DCL at batch 32 (at least two seeds each) and 256,
// the same epochs for every run, kNN after every epoch, kNN and linear on the full test split.
func TestFashionMNISTGPUConfig(t *testing.T) {
	c := loadGPUConfig(t)
	if c.Dataset.Name != "idx" || c.Dataset.ImageSize != 32 || c.Dataset.Limit != 0 || c.Dataset.EvalLimit != 0 || c.Dataset.TestSplit != "test" {
		t.Errorf("dataset %+v: want all of Fashion-MNIST (idx) at 32 px", c.Dataset)
	}
	seeds := map[string]int{}
	for _, r := range c.Runs {
		seeds[r.Cell]++
		if r.Model() != "resnet18-cifar" || r.Backend() != "cuda" || r.Epochs() != c.Runs[0].Epochs() {
			t.Errorf("run %s: %s on %s for %d epochs; want resnet18-cifar on cuda, %d epochs like the others", r.Name, r.Model(), r.Backend(), r.Epochs(), c.Runs[0].Epochs())
		}
	}
	for cell, want := range map[string]int{"infonce-b32": 2, "dcl-b32": 2, "infonce-b256": 1, "dcl-b256": 1} {
		if seeds[cell] < want {
			t.Errorf("cell %s has %d seeds, want at least %d (cells: %v)", cell, seeds[cell], want, seeds)
		}
	}
	if !c.Evaluate.Has("knn") || !c.Evaluate.Has("linear") || c.Evaluate.KNNEvery != 1 {
		t.Errorf("evaluate %+v: want kNN and a linear probe, and the kNN monitor after every epoch", c.Evaluate)
	}
	if c.Preprocess.Views != "online" && c.Preprocess.Passes < c.Runs[0].Epochs() {
		t.Errorf("%d passes for %d epochs: views would repeat", c.Preprocess.Passes, c.Runs[0].Epochs())
	}
}

// TestFashionMNISTGPUConfigRunsScaledDown runs every stage of the experiment, shrunk to
// seconds on the CPU (64 images, a narrow model, one epoch): what is left of the config (the
// dataset at 32 px, the model on those views, the sweep, the evaluations) must work before it
// costs GPU time.
func TestFashionMNISTGPUConfigRunsScaledDown(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Beam pipelines")
	}
	data := os.Getenv("DCL_FASHION_MNIST")
	if data == "" {
		data = "/usr/share/datasets/fashion-mnist"
	}
	if _, err := os.Stat(filepath.Join(data, "train-images-idx3-ubyte.gz")); err != nil {
		t.Skipf("Fashion-MNIST not found in %s (install Debian's dataset-fashion-mnist or set DCL_FASHION_MNIST)", data)
	}
	c := loadGPUConfig(t)
	c.Dataset.Limit, c.Dataset.EvalLimit = 64, 64
	for i := range c.Runs {
		c.Runs[i].Set("epochs", 1)
		c.Runs[i].Set("width", 4)
		c.Runs[i].Set("batch_size", map[int]int{32: 8, 256: 16}[c.Runs[i].BatchSize()]) // two sizes that fit 64 images
	}
	c.Evaluate.Set("knn", "k", 10)
	c.Evaluate.Set("linear", "epochs", 2)
	c.Evaluate.KNNEvery = 0
	out := t.TempDir()
	res, err := reproduce.Run(context.Background(), c, reproduce.Options{Out: out, Input: data, Backend: "cpu",
		CodeVersion: "test", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Runs) != 6 || len(res.Cells) != 4 {
		t.Fatalf("%d runs in %d cells, want 6 in 4", len(res.Runs), len(res.Cells))
	}
	// docs/gpu.md's GPU experiment section is ready for the results: the batch-32 cells compared over
	// their seeds, the batch-256 ones without a claim.
	section := reproduce.DocsSection(res, "scripts/gpu-check.sh OUT experiment", "docs/gpu-experiment", "gpu-experiment", nil)
	flat := regexp.MustCompile(` +`).ReplaceAllString(section, " ") // tables pad their columns
	for _, want := range []string{"| SimCLR (InfoNCE), batch 8, 1 epoch | 1, 2 |", "DCL, batch 16 against SimCLR (InfoNCE), batch 16", "one seed: no claim", analysis.SeedRule} {
		if !strings.Contains(flat, want) {
			t.Errorf("docs/gpu.md's GPU experiment section lacks %q:\n%s", want, section)
		}
	}
	m, err := shards.ReadManifest(context.Background(), filepath.Join(out, reproduce.DataDir, "pretrain"))
	if err != nil {
		t.Fatal(err)
	}
	if m.Config.Height != 32 || m.Config.Width != 32 || m.Config.Channels != 1 {
		t.Errorf("pretraining views are %dx%dx%d, want 32x32x1", m.Config.Height, m.Config.Width, m.Config.Channels)
	}
}
