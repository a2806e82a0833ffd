package reproduce

import (
	"flag"
	"slices"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/experiments"
	"github.com/dcl-beam/dcl-beam/pipelines"
	"github.com/dcl-beam/dcl-beam/transforms/augment"
	"github.com/dcl-beam/dcl-beam/transforms/datasets"
)

const minimal = `
name: tiny
dataset: {name: idx, input: /data/fashion-mnist}
preprocess: {augment: simclr-cifar, passes: 2, seed: 3}
train:
  defaults: {model: small-cnn, epochs: 2, temperature: 0.1, batch_size: 32}
  sweep: {loss: [infonce, dcl], batch_size: [16, 32]}
  paper:
    dcl-b32: {knn_top1: 84.4, source: Table 1}
  runs:
    - {name: dclw, loss: dclw, sigma: 0.5}
evaluate:
  knn: {k: 20, temperature: 0.1}
`

func TestParseExpandsRunsFromDefaults(t *testing.T) {
	c, err := Parse(strings.NewReader(minimal), "tiny.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range c.Runs {
		names = append(names, r.Name)
	}
	want := []string{"dclw", "infonce-b16", "infonce-b32", "dcl-b16", "dcl-b32"}
	if !slices.Equal(names, want) {
		t.Fatalf("runs = %v, want %v", names, want)
	}
	dclw := c.Runs[0]
	if dclw.Model() != "small-cnn" || dclw.Epochs() != 2 || dclw.BatchSize() != 32 || dclw.Setting("sigma") != 0.5 || dclw.Loss() != "dclw" {
		t.Errorf("explicit run did not start from the defaults: %+v", dclw)
	}
	if got := c.Runs[4]; got.Paper.KNNTop1 != 84.4 || got.BatchSize() != 32 || got.Loss() != "dcl" {
		t.Errorf("dcl-b32 = %+v, want the paper figure attached", got)
	}
	if got := c.PaperTable(); len(got) != 1 || got[0].Name != "dcl-b32" {
		t.Errorf("PaperTable = %v", got)
	}
}

// TestParseSweepsQueueSizes: a MoCo queue sweep names its runs by loss and queue (Table 5's
// layout) and carries the method settings into every run.
func TestParseSweepsQueueSizes(t *testing.T) {
	cfg := strings.Replace(minimal, "sweep: {loss: [infonce, dcl], batch_size: [16, 32]}", "sweep: {loss: [infonce, dcl], queue_size: [32, 8192]}", 1)
	cfg = strings.Replace(cfg, "defaults: {model: small-cnn,", "defaults: {method: moco, momentum_ema: 0.99, model: small-cnn,", 1)
	cfg = strings.Replace(cfg, "dcl-b32: {knn", "dcl-q32: {knn", 1)
	c, err := Parse(strings.NewReader(cfg), "queue.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range c.Runs[1:] {
		names = append(names, r.Name)
		if r.Method() != "moco" || r.Setting("momentum_ema") != 0.99 {
			t.Errorf("run %s: method %q, momentum %v; want the defaults' moco and 0.99", r.Name, r.Method(), r.Setting("momentum_ema"))
		}
	}
	if want := []string{"infonce-q32", "infonce-q8192", "dcl-q32", "dcl-q8192"}; !slices.Equal(names, want) {
		t.Errorf("runs = %v, want %v", names, want)
	}
	if got := runLabel(c.Runs[3]); got != "MoCo-v2 (DCL)" {
		t.Errorf("runLabel = %q, want MoCo-v2 (DCL)", got)
	}
}

// TestParseAcceptsEveryRegisteredDataset: the config reads the dataset registry, so a dataset
// preprocess accepts (mnist and fashion-mnist were refused here once) is accepted here too.
func TestParseAcceptsEveryRegisteredDataset(t *testing.T) {
	for _, name := range datasets.Names() {
		cfg := strings.Replace(minimal, "name: idx", "name: "+name, 1)
		if _, err := Parse(strings.NewReader(cfg), "tiny.yaml"); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestParseRejectsBadConfigs(t *testing.T) {
	tests := []struct {
		name string
		give string // replaces the first occurrence of old in minimal
		old  string
		want string
	}{
		{"unknown top-level key", "evaluat:", "evaluate:", "field evaluat not found"},
		{"unknown key in a run", "{name: dclw, loss: dclw, sigm: 0.5}", "{name: dclw, loss: dclw, sigma: 0.5}", "field sigm not found"},
		{"unknown key in defaults", "model: small-cnn, epoch: 2", "model: small-cnn, epochs: 2", "field epoch not found"},
		{"unknown loss", "loss: [infonce, dcl2]", "loss: [infonce, dcl]", `loss "dcl2"`},
		{"batch size 1", "batch_size: [1, 32]", "batch_size: [16, 32]", "batch_size 1"},
		{"zero temperature", "temperature: 0,", "temperature: 0.1,", "temperature 0"},
		{"unknown dataset", "name: mnist2", "name: idx", `dataset.name "mnist2"`},
		{"paper names a missing run", "dcl-b64: {knn", "dcl-b32: {knn", `names run "dcl-b64"`},
		{"duplicate run names", "{name: dcl-b16, loss: dclw", "{name: dclw, loss: dclw", "two runs have this name"},
		{"no passes", "passes: 0", "passes: 2", "preprocess.passes 0"},
		{"bad knn k", "k: 0,", "k: 20,", "evaluate.knn.k 0"},
		{"unknown precision", "{name: dclw, precision: fp16, loss: dclw", "{name: dclw, loss: dclw", `precision "fp16": want float32, tf32 or bf16`},
		{"unknown method", "{name: dclw, method: byol, loss: dclw", "{name: dclw, loss: dclw", `unknown training method "byol"`},
		{"a queue for simclr", "{name: dclw, queue_size: 64, loss: dclw", "{name: dclw, loss: dclw", "has no setting queue_size"},
		{"hypersphere with moco", "{name: dclw, method: moco, loss: hypersphere", "{name: dclw, loss: dclw", "no queue form"},
		{"moco momentum 1", "{name: dclw, method: moco, momentum_ema: 1, loss: dclw", "{name: dclw, loss: dclw", "must be in [0, 1)"},
		{"gate on an unknown metric", "gates: {knn_top2: {max_drop_vs_previous: 1}}\nevaluate:", "evaluate:", `gates: unknown metric "knn_top2"`},
		{"gate with an unknown key", "gates: {knn_top1: {max_drop: 1}}\nevaluate:", "evaluate:", "field max_drop not found"},
		{"gate allowing a negative drop", "gates: {knn_top1: {max_drop_vs_previous: -1}}\nevaluate:", "evaluate:", "gates.knn_top1.max_drop_vs_previous -1: must be a drop of 0 or more"},
		{"gate without a bound", "gates: {knn_top1: {}}\nevaluate:", "evaluate:", "gates.knn_top1: give max_drop_vs_previous"},
		{"gate on a metric no evaluation measures", "gates: {linear_top1: {max_drop_vs_previous: 1}}\nevaluate:", "evaluate:", "gates.linear_top1: the config has no evaluate.linear section"},
		{"gate against a paper figure that does not exist", "gates: {train_loss: {max_drop_vs_paper: 1}}\nevaluate:", "evaluate:", "the paper has no train_loss figures"},
		// Values YAML would let through changed, or that would panic later.
		{"infinite lr", "temperature: 0.1, batch_size: 32, lr: .inf}", "temperature: 0.1, batch_size: 32}", "line 6: train.defaults.lr: .inf is not a finite number"},
		{"NaN knn temperature", "temperature: .nan}", "temperature: 0.1}\n", "evaluate.knn.temperature: .nan is not a finite number"},
		{"infinite gate", "gates: {knn_top1: {max_drop_vs_previous: -.Inf}}\nevaluate:", "evaluate:", "gates.knn_top1.max_drop_vs_previous: -.Inf is not a finite number"},
		{"infinite sigma in a run", "{name: dclw, loss: dclw, sigma: .inf}", "{name: dclw, loss: dclw, sigma: 0.5}", "sigma: .inf is not a finite number"},
		{"fractional passes", "passes: 2.5", "passes: 2", "preprocess.passes: 2.5 is not a whole number"},
		{"fractional batch size in a sweep", "batch_size: [16, 32.5]", "batch_size: [16, 32]", "train.sweep.batch_size[1]: 32.5 is not a whole number"},
		{"negative probe lr", "knn: {k: 20, temperature: 0.1}\n  linear: {lr: -30}", "knn: {k: 20, temperature: 0.1}", "evaluate.linear.lr -30: must not be negative"},
		{"negative npc samples", "knn: {k: 20, temperature: 0.1}\n  npc: {batch_sizes: [8], samples: -1}", "knn: {k: 20, temperature: 0.1}", "evaluate.npc.samples -1"},
		{"negative width", "model: small-cnn, width: -4, epochs: 2", "model: small-cnn, epochs: 2", "width -4: must not be negative"},
		{"absurd image size", "input: /data/fashion-mnist, image_size: 100000}", "input: /data/fashion-mnist}", "dataset.image_size 100000"},
		{"second document", "knn: {k: 20, temperature: 0.1}\n---\nname: other\n", "knn: {k: 20, temperature: 0.1}\n", "a second YAML document"},
		{"inputs for a split the config does not read", "input: /data/fashion-mnist, inputs: {val: /x}}", "input: /data/fashion-mnist}", "val"},
		{"seed and seeds", "{name: dclw, seed: 4, seeds: [1, 2], loss: dclw", "{name: dclw, loss: dclw", "seed 4 and seeds [1 2]: give one"},
		{"a seed twice", "{name: dclw, seeds: [1, 1], loss: dclw", "{name: dclw, loss: dclw", "want distinct seeds"},
		{"seed 0", "{name: dclw, seeds: [0, 1], loss: dclw", "{name: dclw, loss: dclw", "want distinct seeds of 1 or more"},
		{"a departure from no setting of the recipe", "departures: {colour: blue}\nevaluate:", "evaluate:", "departures.colour: not a setting of the recipe"},
		{"a departure without its reason", "departures: {augment: ''}\nevaluate:", "evaluate:", "departures.augment: say where and why"},
		{"an evaluation preset for pretraining", "augment: none", "augment: simclr-cifar", `preprocess.augment "none"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(minimal, tt.old) {
				t.Fatalf("test setup: %q not in the base config", tt.old)
			}
			cfg := strings.Replace(minimal, tt.old, tt.give, 1)
			_, err := Parse(strings.NewReader(cfg), "bad.yaml")
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "bad.yaml") {
				t.Errorf("Parse = %v, want an error naming bad.yaml and containing %q", err, tt.want)
			}
		})
	}
	if _, err := Parse(strings.NewReader(""), "empty.yaml"); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("Parse(empty) = %v", err)
	}
}

// seeds make a cell of one run per seed, named by the cell and the seed, with the cell's paper
// figures; one seed is a run of its own, named as without seeds.
func TestParseExpandsSeedsIntoCells(t *testing.T) {
	cfg := strings.Replace(minimal, "defaults: {model: small-cnn,", "defaults: {seeds: [1, 2], model: small-cnn,", 1)
	cfg = strings.Replace(cfg, "{name: dclw, loss: dclw, sigma: 0.5}", "{name: dclw, loss: dclw, sigma: 0.5, seeds: [7]}", 1)
	c, err := Parse(strings.NewReader(cfg), "seeds.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var names, cells []string
	for _, r := range c.Runs {
		names = append(names, r.Name)
		cells = append(cells, r.Cell)
		if len(r.Seeds) != 0 {
			t.Errorf("run %s keeps seeds %v; a run has one seed", r.Name, r.Seeds)
		}
	}
	// Seed by seed: every cell's first seed, then every cell's second.
	want := []string{"dclw", "infonce-b16-s1", "infonce-b32-s1", "dcl-b16-s1", "dcl-b32-s1", "infonce-b16-s2", "infonce-b32-s2", "dcl-b16-s2", "dcl-b32-s2"}
	if !slices.Equal(names, want) {
		t.Fatalf("runs = %v, want %v", names, want)
	}
	if want := []string{"dclw", "infonce-b16", "infonce-b32", "dcl-b16", "dcl-b32", "infonce-b16", "infonce-b32", "dcl-b16", "dcl-b32"}; !slices.Equal(cells, want) {
		t.Errorf("cells = %v, want %v", cells, want)
	}
	if c.Runs[0].Seed() != 7 || c.Runs[1].Seed() != 1 || c.Runs[5].Seed() != 2 {
		t.Errorf("seeds %d, %d and %d, want 7, 1 and 2", c.Runs[0].Seed(), c.Runs[1].Seed(), c.Runs[5].Seed())
	}
	for _, r := range []RunConfig{c.Runs[4], c.Runs[8]} {
		if r.Paper.KNNTop1 != 84.4 {
			t.Errorf("run %s of cell dcl-b32 lacks the cell's paper figure", r.Name)
		}
	}
	base, err := Parse(strings.NewReader(strings.Replace(cfg, "seeds: [1, 2]", "seeds: [1, 3]", 1)), "seeds.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if base.Fingerprint() == c.Fingerprint() {
		t.Error("other seeds, the same fingerprint")
	}
}

// The fingerprint changes with what is computed, not with where the data lies, the paper's
// figures or the gates.
func TestFingerprint(t *testing.T) {
	base, err := Parse(strings.NewReader(minimal), "tiny.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, old, give string
		same            bool
	}{
		{"another input folder", "input: /data/fashion-mnist", "input: /elsewhere", true},
		{"another paper figure", "knn_top1: 84.4", "knn_top1: 90", true},
		{"a gate", "evaluate:", "gates: {knn_top1: {max_drop_vs_previous: 1}}\nevaluate:", true},
		{"another description", "name: tiny", "name: tiny\ndescription: words", true},
		{"another seed", "seed: 3", "seed: 4", false},
		{"another run setting", "sigma: 0.5", "sigma: 0.25", false},
		{"another evaluation", "k: 20", "k: 21", false},
	}
	for _, tt := range tests {
		c, err := Parse(strings.NewReader(strings.Replace(minimal, tt.old, tt.give, 1)), "tiny.yaml")
		if err != nil {
			t.Fatal(err)
		}
		if got := c.Fingerprint() == base.Fingerprint(); got != tt.same {
			t.Errorf("%s: same fingerprint = %v, want %v", tt.name, got, tt.same)
		}
	}
}

// Every shipped config must parse, and every run with a paper figure must say where it is from.
func TestShippedConfigsParse(t *testing.T) {
	names := experiments.Names()
	if len(names) < 9 {
		t.Fatalf("only %d shipped configs: %v", len(names), names)
	}
	for _, name := range names {
		f, err := experiments.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		c, err := Parse(f, name+".yaml")
		f.Close()
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		if c.Name != name {
			t.Errorf("%s.yaml has name %q; the file and the name must agree", name, c.Name)
		}
		for _, r := range c.PaperTable() {
			if r.Paper.Source == "" {
				t.Errorf("%s: run %s has a paper figure without a source", name, r.Name)
			}
		}
	}
}

// TestAugmentationIsTheCommandLines: a config's preset, image size and augment_overrides
// give the pretraining views dcl preprocess gives for the same flags (both resolve them in
// pipelines.PreprocessAugment); the evaluation views take no overrides; an unknown override
// is refused naming the key.
func TestAugmentationIsTheCommandLines(t *testing.T) {
	cfg := strings.Replace(minimal, "passes: 2, seed: 3}", "passes: 2, seed: 3, augment_overrides: {jitter-p: '0.5', crop-scale: '0.2,1'}}", 1)
	cfg = strings.Replace(cfg, "input: /data/fashion-mnist}", "input: /data/fashion-mnist, image_size: 24}", 1)
	c, err := Parse(strings.NewReader(cfg), "aug.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, d, err := datasets.Spec{Dataset: c.Dataset.Name}.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	r := &runner{cfg: c}
	got, err := r.augmentConfig(d, c.Preprocess.Augment, true)
	if err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("preprocess", flag.ContinueOnError)
	overrides := augment.RegisterFlags(fs, "")
	if err := fs.Parse([]string{"--crop-scale=0.2,1", "--jitter-p=0.5"}); err != nil {
		t.Fatal(err)
	}
	want, err := pipelines.PreprocessAugment(d, "simclr-cifar", 24, overrides.List())
	if err != nil {
		t.Fatal(err)
	}
	if got != want || got.JitterP != 0.5 || got.Size != 24 {
		t.Errorf("the config's views %s, the command line's %s", got, want)
	}
	if eval, err := r.augmentConfig(d, augment.None, false); err != nil || !eval.Eval || eval.Size != 24 {
		t.Errorf("evaluation views %s, %v", eval, err)
	}
	c.Preprocess.AugmentOverrides["jitter"] = "1"
	if _, err := r.augmentConfig(d, c.Preprocess.Augment, true); err == nil || !strings.Contains(err.Error(), `preprocess.augment_overrides: unknown parameter "jitter"`) {
		t.Errorf("an unknown override: %v", err)
	}
}
