package reproduce

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/internal/testing/testfiles"
	"github.com/dcl-beam/dcl-beam/pipelines"
	"github.com/dcl-beam/dcl-beam/shards"
	"github.com/dcl-beam/dcl-beam/transforms/augment"
	"github.com/dcl-beam/dcl-beam/transforms/datasets"
)

const folderConfig = `
name: folders
dataset: {name: folder, input: INPUT, image_size: 8, test_split: test}
preprocess: {augment: simclr-cifar, passes: 1, seed: 7}
train:
  defaults: {model: small-cnn, width: 4, epochs: 1, batch_size: 4, temperature: 0.2, backend: cpu}
  runs: [{name: dcl, loss: dcl}]
evaluate: {knn: {k: 3, temperature: 0.1}}
`

func parseFolder(t *testing.T, input, extra string) *Config {
	t.Helper()
	text := strings.Replace(folderConfig, "INPUT", input, 1)
	if extra != "" {
		text = strings.Replace(text, "test_split: test}", "test_split: test, "+extra+"}", 1)
	}
	cfg, err := Parse(strings.NewReader(text), "folders.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// writeSplitFolders writes an image folder dataset root with train/ and test/ splits of two
// classes, and returns it.
func writeSplitFolders(t *testing.T) string {
	root := t.TempDir()
	for i, split := range []string{"train", "test"} {
		for j, class := range []string{"cat", "dog"} {
			for k := range 4 {
				testfiles.WriteFile(t, filepath.Join(root, split, class, fmt.Sprintf("%d.png", k)), testfiles.PNG(t, 8, 8, 100*i+10*j+k))
			}
		}
	}
	return root
}

// prepare runs only the data stages of cfg into out.
func prepare(t *testing.T, cfg *Config, out string) error {
	t.Helper()
	r, err := newRunner(cfg, Options{Out: out, CodeVersion: "test"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if r.ledger, err = loadLedger(t.Context(), out); err != nil {
		t.Fatal(err)
	}
	_, err = r.prepareData(t.Context())
	return err
}

// TestEachSplitReadsItsOwnImages: from a folder dataset's root, pretraining and the kNN bank
// read train/ and the test split test/, and the manifests say so; an input that would give
// the test split the training images is refused before anything is written, in one line
// naming both splits; per-split inputs in the config work.
func TestEachSplitReadsItsOwnImages(t *testing.T) {
	root := writeSplitFolders(t)
	out := t.TempDir()
	if err := prepare(t, parseFolder(t, root, ""), out); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ dir, split string }{{"pretrain", "train"}, {"eval-train", "train"}, {"eval-test", "test"}} {
		m, err := shards.ReadManifest(t.Context(), filepath.Join(out, DataDir, c.dir))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, s := range m.Config.Sources {
			names = append(names, s.Name)
			if len(s.SHA256) != 64 {
				t.Errorf("%s: source %s has digest %q", c.dir, s.Name, s.SHA256)
			}
		}
		want := []string{filepath.Join(root, c.split, "cat"), filepath.Join(root, c.split, "dog")}
		if strings.Join(names, " ") != strings.Join(want, " ") || m.Records != 8 {
			t.Errorf("%s: %d records from %q, want 8 from %q", c.dir, m.Records, names, want)
		}
	}

	// One folder of class folders for every split: the test split would read the training images.
	photos := filepath.Join(root, "train")
	other := filepath.Join(t.TempDir(), "photos")
	if err := os.Symlink(photos, other); err != nil {
		t.Fatal(err)
	}
	for _, in := range []string{other, photos} {
		_, err := Plan(t.Context(), parseFolder(t, in, ""), Options{Out: t.TempDir()})
		t.Log(err)
		if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "test") || !strings.Contains(err.Error(), "train") {
			t.Errorf("input %s: %v; want a one-line refusal naming the test and train splits", in, err)
		}
	}
	_, err := Plan(t.Context(), parseFolder(t, other, ""), Options{Out: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "the test split (eval-test) would read "+filepath.Join(other, "cat")+", which the train split (pretrain) reads too") {
		t.Errorf("got %v", err)
	}
	// The test split given its own input in the config.
	cfg := parseFolder(t, other, "inputs: {test: "+filepath.Join(root, "test")+"}")
	if _, err := Plan(t.Context(), cfg, Options{Out: t.TempDir()}); err != nil {
		t.Errorf("per-split inputs: %v", err)
	}
}

// TestEvaluationRefusesATestSetSharingImages: whatever wrote the datasets (here dcl
// preprocess by hand, through a link that hides that the folder is the train split's),
// evaluation is refused when the eval-test manifest names a source of the pretraining or
// eval-train manifests, and when it names none (an older manifest).
func TestEvaluationRefusesATestSetSharingImages(t *testing.T) {
	root := writeSplitFolders(t)
	out := t.TempDir()
	cfg := parseFolder(t, root, "")
	if err := prepare(t, cfg, out); err != nil {
		t.Fatal(err)
	}
	alias := filepath.Join(t.TempDir(), "held-out")
	if err := os.Symlink(filepath.Join(root, "train"), alias); err != nil {
		t.Fatal(err)
	}
	testDir := filepath.Join(out, DataDir, "eval-test")
	aug, err := augment.Preset(augment.None, 8)
	if err != nil {
		t.Fatal(err)
	}
	job, err := pipelines.PlanPreprocess(t.Context(), pipelines.PreprocessOptions{
		Spec:   datasets.Spec{Dataset: datasets.Folder, Input: alias, Split: "test"},
		Output: testDir, Augment: aug, Passes: 1, Seed: 7, CodeVersion: "test", Overwrite: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pipelines.RunPreprocess(t.Context(), job); err != nil {
		t.Fatal(err)
	}
	err = prepare(t, cfg, out)
	t.Log(err)
	if err == nil || !strings.Contains(err.Error(), "the test split (eval-test) read "+filepath.Join(alias, "cat")) || !strings.Contains(err.Error(), "(pretrain) reads too ("+filepath.Join(root, "train", "cat")+")") {
		t.Errorf("got %v; want a refusal naming both sources", err)
	}

	// A manifest that names no sources cannot be checked.
	m, err := shards.ReadManifest(t.Context(), testDir)
	if err != nil {
		t.Fatal(err)
	}
	m.Config.Sources = nil
	data, err := m.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if err := storage.WriteFile(context.Background(), filepath.Join(testDir, shards.ManifestName), data); err != nil {
		t.Fatal(err)
	}
	err = prepare(t, cfg, out)
	if err == nil || !strings.Contains(err.Error(), "records no sources") {
		t.Errorf("got %v; want a refusal of a manifest without sources", err)
	}
}
