package experiments_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/docsections"
	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/reproduce"
)

// TestDemoRunsScaledDownIntoTheReadme is the demo's own test: its config, shrunk to seconds
// on the CPU (64 images, a narrow model, one epoch), runs every stage with both seeds of
// both cells, and the README section made from its fresh results.json is what the check
// accepts, while a README whose figure differs from those results fails it.
func TestDemoRunsScaledDownIntoTheReadme(t *testing.T) {
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
	c := loadConfig(t, "demo-fashion-mnist")
	c.Dataset.Limit, c.Dataset.EvalLimit = 64, 64
	c.Preprocess.Passes = 1
	for i := range c.Runs {
		c.Runs[i].Set("epochs", 1)
		c.Runs[i].Set("width", 4)
		c.Runs[i].Set("batch_size", 16)
	}
	c.Evaluate.Set("knn", "k", 10)
	c.Evaluate.Set("linear", "epochs", 2)
	c.Evaluate.Set("npc", "batch_sizes", []int{8, 16})
	c.Evaluate.KNNEvery = 1
	out := t.TempDir()
	ctx := context.Background()
	if _, err := reproduce.Run(ctx, c, reproduce.Options{Out: out, Input: data, CodeVersion: "test",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}); err != nil {
		t.Fatal(err)
	}
	var res reproduce.Results
	if err := storage.LoadJSON(ctx, filepath.Join(out, reproduce.ResultsName), &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Cells) != 2 || len(res.Cells[0].Runs) != 2 || len(res.Comparisons) == 0 {
		t.Fatalf("cells %+v, comparisons %+v: want InfoNCE and DCL with two seeds each, compared", res.Cells, res.Comparisons)
	}
	figures, err := reproduce.WriteDocsFigures(ctx, &res, out, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	section := reproduce.DocsSection(&res, "make demo", "docs/demo", "docs/demo", figures)
	readme := []byte(docsections.Begin("demo") + "\n" + docsections.End("demo") + "\n")
	readme, err = docsections.Splice(readme, "demo", section)
	if err != nil {
		t.Fatal(err)
	}
	if err := docsections.Check(readme, "demo", section); err != nil {
		t.Errorf("the README made from the demo's results fails the check: %v", err)
	}
	flat := regexp.MustCompile(` +`).ReplaceAllString(section, " ") // tables pad their columns
	for _, want := range []string{"| SimCLR (InfoNCE), batch 16, 1 epoch | 1, 2 |", "](docs/demo/knn-by-epoch.png)", "](docs/demo/tsne.png)", "NPC multiplier q"} {
		if !strings.Contains(flat, want) {
			t.Errorf("the demo's README section lacks %q:\n%s", want, section)
		}
	}
	s := res.Cells[0].Metrics["knn_top1"]
	fig := fmt.Sprintf("%.1f ± %.1f", s.Mean, s.SD)
	typed := strings.Replace(string(readme), fig, fig+"1", 1)
	if err := docsections.Check([]byte(typed), "demo", section); !errors.Is(err, docsections.ErrStale) {
		t.Errorf("a README whose figure %s differs from the fresh results: check says %v", fig, err)
	}
}
