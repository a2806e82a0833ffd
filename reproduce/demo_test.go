package reproduce

import (
	"context"
	"os"
	"slices"
	"testing"

	"github.com/dcl-beam/dcl-beam/experiments"
	"github.com/dcl-beam/dcl-beam/trainstep"
	"github.com/dcl-beam/dcl-beam/transforms/datasets"
)

// TestDemoNamesClassesWithTheSameFigures: the demo reads Fashion-MNIST as the registered
// fashion-mnist dataset, whose class names reach the shards, embeddings and t-SNE legend, and
// everything its figures depend on is what reading the files as raw idx gave: the encoder's
// input normalisation, the views' size, channels and augmentation preset, and the records
// (keys, labels, pixels) in order.
func TestDemoNamesClassesWithTheSameFigures(t *testing.T) {
	f, err := experiments.Open("demo-fashion-mnist")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cfg, err := Parse(f, "demo-fashion-mnist")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Dataset.Name != datasets.FashionMNIST {
		t.Fatalf("the demo reads %q, want %s (its class names)", cfg.Dataset.Name, datasets.FashionMNIST)
	}
	fm, err := datasets.Lookup(datasets.FashionMNIST)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := datasets.Lookup(datasets.IDX)
	if err != nil {
		t.Fatal(err)
	}
	if fm.ViewSize != raw.ViewSize || fm.Channels != raw.Channels || fm.Augment != raw.Augment {
		t.Errorf("fashion-mnist's views (%d px, %d channels, %s) differ from idx's (%d, %d, %s)",
			fm.ViewSize, fm.Channels, fm.Augment, raw.ViewSize, raw.Channels, raw.Augment)
	}
	for _, run := range cfg.Runs {
		training, err := run.Training()
		if err != nil {
			t.Fatal(err)
		}
		model := training.Step.Model
		model.Channels = 1
		if model.Dataset == "" {
			model.Dataset = datasets.FashionMNIST
		}
		m, err := trainstep.NewModel(model)
		if err != nil {
			t.Fatal(err)
		}
		wantMean, wantStd, err := datasets.Normalization(datasets.IDX, 1)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.Config(); !slices.Equal(got.Mean, wantMean) || !slices.Equal(got.Std, wantStd) {
			t.Errorf("run %s normalises with mean %v std %v; the demo always had idx's %v %v", run.Name, got.Mean, got.Std, wantMean, wantStd)
		}
	}

	dir := os.Getenv("DCL_FASHION_MNIST")
	if dir == "" {
		dir = "/usr/share/datasets/fashion-mnist"
	}
	if _, err := os.Stat(dir + "/t10k-images-idx3-ubyte.gz"); err != nil {
		t.Skipf("no Fashion-MNIST in %s to compare the records", dir)
	}
	read := func(name string) (records []datasets.Record, classes []string) {
		ctx := context.Background()
		plan, err := datasets.MakePlan(ctx, datasets.Spec{Dataset: name, Input: dir, Split: "test"})
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range plan.Units {
			if _, err := datasets.Read(ctx, u, func(r datasets.Record) error { records = append(records, r); return nil },
				func(b datasets.BadRecord) error { t.Errorf("%s: bad record %+v", name, b); return nil }); err != nil {
				t.Fatal(err)
			}
		}
		return records, plan.Classes
	}
	a, named := read(datasets.FashionMNIST)
	b, _ := read(datasets.IDX)
	if len(a) != 10000 || len(a) != len(b) {
		t.Fatalf("%d and %d records, want 10,000 each", len(a), len(b))
	}
	for i := range a {
		if a[i].Key != b[i].Key || a[i].Label != b[i].Label || !slices.Equal(a[i].Pixels.Pix, b[i].Pixels.Pix) {
			t.Fatalf("record %d differs: %s label %d, idx's %s label %d", i, a[i].Key, a[i].Label, b[i].Key, b[i].Label)
		}
	}
	if len(named) != 10 || named[0] != "T-shirt/top" {
		t.Errorf("fashion-mnist's classes %v, want the ten names", named)
	}
}
