package experiments_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/experiments"
	"github.com/dcl-beam/dcl-beam/internal/testing/pipelinetest"
	"github.com/dcl-beam/dcl-beam/internal/testing/testfiles"
	"github.com/dcl-beam/dcl-beam/reproduce"
	"github.com/dcl-beam/dcl-beam/transforms/datasets"
)

var updateStorage = flag.Bool("update-storage", false, "rewrite "+experiments.StorageFile+" from the built-in configs' plans")

const storageCommand = "go test ./experiments -run TestStorageFigures -update-storage"

// storageTolerance is how far a kept figure may be from a fresh one: the sizes of encoded
// views move by a few bytes when a decoder or an encoder changes its rounding, which is no
// reason to regenerate the file, while a changed config or estimate moves them by far more.
const storageTolerance = 0.01

// TestStorageFigures plans every built-in config as `dcl reproduce --config NAME --input
// FIXTURE --plan` does, once as the config is and once with the pretraining views stored
// for every epoch (preprocess.passes = the epochs, views offline: fresh stored views every
// epoch), on a small input of the dataset's published format, and scales each dataset stage's
// "writes ≈" to the dataset's published size (or the config's limit): the estimate is the
// records times the mean size of the rows made from a fixed sample of records
// (pipelines.PreprocessJob.StorageEstimate), linear in the record count. The figures must be
// those kept in docs/storage/storage.json, which -update-storage rewrites and `make docs` puts in
// docs/preprocessing.md.
func TestStorageFigures(t *testing.T) {
	ctx := context.Background()
	inputs, method := writeStorageFixtures(t)
	fresh := experiments.Storage{Command: storageCommand, Method: method}
	for _, name := range experiments.Names() {
		c := loadConfig(t, name)
		in, ok := inputs[c.Dataset.Name]
		if !ok {
			t.Fatalf("%s: no fixture of dataset %s: add one to writeStorageFixtures", name, c.Dataset.Name)
		}
		fresh.Configs = append(fresh.Configs, storageFigure(ctx, t, name, in))
	}
	got, err := json.MarshalIndent(fresh, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	path := filepath.Join("..", experiments.StorageFile)
	if *updateStorage {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v: run %s", err, storageCommand)
	}
	var kept experiments.Storage
	if err := json.Unmarshal(raw, &kept); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if diffs := storageDiffs(kept, fresh); len(diffs) > 0 {
		t.Errorf("%s is not what the configs and the estimator give now (run %s, then make docs):\n%s",
			experiments.StorageFile, storageCommand, strings.Join(diffs, "\n"))
	}
}

// storageDiffs lists where kept differs from fresh: any field, and bytes by more than
// storageTolerance.
func storageDiffs(kept, fresh experiments.Storage) []string {
	var diffs []string
	if kept.Command != fresh.Command || kept.Method != fresh.Method {
		diffs = append(diffs, fmt.Sprintf("command and method %q, %q; want %q, %q", kept.Command, kept.Method, fresh.Command, fresh.Method))
	}
	if len(kept.Configs) != len(fresh.Configs) {
		return append(diffs, fmt.Sprintf("%d configs; want %d", len(kept.Configs), len(fresh.Configs)))
	}
	near := func(a, b int64) bool { return math.Abs(float64(a-b)) <= storageTolerance*float64(b) }
	for i, k := range kept.Configs {
		f := fresh.Configs[i]
		bytesNear := near(k.StoredViews, f.StoredViews) && near(k.Configured, f.Configured) && near(k.Evaluation, f.Evaluation)
		k.StoredViews, k.Configured, k.Evaluation = f.StoredViews, f.Configured, f.Evaluation
		if k != f || !bytesNear {
			diffs = append(diffs, fmt.Sprintf("%+v\n  want %+v", kept.Configs[i], fresh.Configs[i]))
		}
	}
	return diffs
}

// storageFigure plans config name on input both ways and scales its datasets' estimates.
func storageFigure(ctx context.Context, t *testing.T, name, input string) experiments.StorageFigure {
	t.Helper()
	c := loadConfig(t, name)
	epochs := 0
	for _, r := range c.Runs {
		epochs = max(epochs, r.Epochs())
	}
	d := c.Dataset
	f := experiments.StorageFigure{Config: name, Dataset: d.Name, Split: d.PretrainSplit, Epochs: epochs, Views: "offline", Passes: c.Preprocess.Passes}
	if c.Preprocess.Views == "online" {
		f.Views, f.Passes = "online", 0
	}
	// The records of each dataset stage in the fixture and at the published size.
	type scale struct{ fixture, published int64 }
	scales := map[string]scale{}
	type stage struct {
		stage, split string
		limit        int
	}
	stages := []stage{{"pretrain", d.PretrainSplit, d.Limit}, {"eval-train", d.TrainSplit, d.EvalLimit}, {"eval-test", d.TestSplit, d.EvalLimit}}
	if l, ok := c.Evaluate.Settings("linear"); ok && l.String("crops") == "augmented" {
		// The linear probe's augmented crops: passes of the train split.
		stages = append(stages, stage{"eval-train-crops", d.TrainSplit, d.EvalLimit})
	}
	for _, s := range stages {
		p, err := datasets.MakePlan(ctx, datasets.Spec{Dataset: d.Name, Input: input, Split: s.split})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		desc, err := datasets.Lookup(d.Name)
		if err != nil {
			t.Fatal(err)
		}
		published := desc.Published[s.split]
		if d.Name == datasets.IDX {
			// IDX declares no count of its own: the built-in configs that read IDX files
			// read Fashion-MNIST's (their dataset.input).
			if !strings.Contains(d.Input, "fashion-mnist") {
				t.Fatalf("%s reads IDX files from %s, not Fashion-MNIST's: say whose published count to scale to", name, d.Input)
			}
			fm, err := datasets.Lookup(datasets.FashionMNIST)
			if err != nil {
				t.Fatal(err)
			}
			published = fm.Published[s.split]
		}
		if published == 0 {
			t.Fatalf("%s: dataset %s declares no published count of its %s split (datasets.Descriptor.Published)", name, d.Name, s.split)
		}
		if s.limit > 0 {
			p.Records, published = min(p.Records, int64(s.limit)), min(published, int64(s.limit))
		}
		scales["preprocess "+s.stage] = scale{p.Records, published}
	}
	f.Records = scales["preprocess pretrain"].published
	plan := func(c *reproduce.Config) map[string]int64 {
		stages, err := reproduce.Plan(ctx, c, reproduce.Options{Out: t.TempDir(), Input: input, CodeVersion: "test",
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		writes := map[string]int64{}
		for _, s := range stages {
			sc, ok := scales[s.Name]
			if !ok {
				continue
			}
			if s.Writes <= 0 {
				t.Fatalf("%s: stage %s has no estimate", name, s.Name)
			}
			writes[s.Name] = int64(math.Round(float64(s.Writes) * float64(sc.published) / float64(sc.fixture)))
		}
		if len(writes) != len(scales) {
			t.Fatalf("%s: the plan estimates %v; want the stages %v", name, writes, slices.Sorted(mapKeys(scales)))
		}
		return writes
	}
	now := plan(c)
	before := loadConfig(t, name)
	before.Preprocess.Views, before.Preprocess.Passes = "", epochs
	was := plan(before)
	f.StoredViews, f.Configured = was["preprocess pretrain"], now["preprocess pretrain"]
	f.Evaluation = now["preprocess eval-train"] + now["preprocess eval-test"] + now["preprocess eval-train-crops"]
	if e := was["preprocess eval-train"] + was["preprocess eval-test"] + was["preprocess eval-train-crops"]; e != f.Evaluation {
		t.Errorf("%s: the evaluation datasets take %d bytes with stored views, %d as configured: want the same", name, e, f.Evaluation)
	}
	return f
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// storagePhotos is how many distinct photograph-like JPEGs the ImageNet fixture holds; its
// class folders link to them in turn, so that every one of ILSVRC-2012's 1,000 classes has
// an image without writing 1,000 of them.
const storagePhotos = 8

// writeStorageFixtures writes a small input of every dataset the built-in configs read, in
// its published format, and says what they are.
func writeStorageFixtures(t *testing.T) (map[string]string, string) {
	t.Helper()
	root := t.TempDir()
	in := func(name string) string { return filepath.Join(root, name) }
	pipelinetest.WriteCIFAR10(t, in("cifar10"), 4)
	writeCIFAR100(t, in("cifar100"), 20, 4)
	pipelinetest.WriteSTL10(t, in("stl10"), 8, 8, 8)
	for _, split := range []string{"train", "test"} {
		pipelinetest.WriteIDX(t, in("idx"), split, 20, true)
	}
	var photoBytes int
	var photos []string
	for i := range storagePhotos {
		p := filepath.Join(root, "photos", fmt.Sprintf("%d.JPEG", i))
		data := testfiles.PhotoJPEG(t, 500, 375, i)
		testfiles.WriteFile(t, p, data)
		photos = append(photos, p)
		photoBytes += len(data)
	}
	imagenet := in("ILSVRC2012")
	for i, syn := range datasets.ImageNetSynsets() {
		link(t, photos[i%len(photos)], filepath.Join(imagenet, "train", syn, syn+"_1.JPEG"))
		link(t, photos[(i+1)%len(photos)], filepath.Join(imagenet, "val", syn, fmt.Sprintf("ILSVRC2012_val_%08d.JPEG", i+1)))
	}
	inputs := map[string]string{
		datasets.CIFAR10: in("cifar10"), datasets.CIFAR100: in("cifar100"), datasets.STL10: in("stl10"),
		datasets.IDX: in("idx"), datasets.FashionMNIST: in("idx"),
		datasets.ImageNet: imagenet, datasets.ImageNet100: imagenet,
	}
	method := fmt.Sprintf("`dcl reproduce --plan`'s estimates (pipelines.PreprocessJob.StorageEstimate: the mean size of the rows "+
		"the writer makes of a sample of records, times the records and the passes) on small inputs of each dataset's published "+
		"format, scaled to its published record count: CIFAR and STL-10 binary files and gzipped IDX files of synthetic "+
		"textures, ILSVRC-2012 class folders of %d photograph-like 500×375 JPEGs of %.0f KB on average (the mean ILSVRC-2012 "+
		"training image is about 110 KB)", storagePhotos, float64(photoBytes)/float64(storagePhotos)/1000)
	return inputs, method
}

// link makes dst a hard link to src (a copy where links are refused).
func link(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(src, dst); err == nil {
		return
	}
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	testfiles.WriteFile(t, dst, data)
}

// writeCIFAR100 writes train.bin and test.bin of CIFAR-100's binary version: a coarse and a
// fine label byte, then the R, G and B planes.
func writeCIFAR100(t *testing.T, dir string, train, test int) {
	t.Helper()
	for _, f := range []struct {
		name string
		n    int
	}{{"train.bin", train}, {"test.bin", test}} {
		var b bytes.Buffer
		for i := range f.n {
			rec := pipelinetest.CIFAR10Record(i)
			b.Write([]byte{byte(i % 20), byte(i % 100)})
			b.Write(rec[1:])
		}
		testfiles.WriteFile(t, filepath.Join(dir, f.name), b.Bytes())
	}
}
