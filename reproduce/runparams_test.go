package reproduce

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// legacyRun is RunConfig as it was before the losses and methods declared their parameters
// (one field per parameter): the JSON of a run (fingerprints, run.json, results) must not
// change.
type legacyRun struct {
	Name            string       `json:"name,omitempty"`
	Method          string       `json:"method,omitempty"`
	Loss            string       `json:"loss,omitempty"`
	Model           string       `json:"model,omitempty"`
	Width           int          `json:"width,omitempty"`
	BatchSize       int          `json:"batch_size,omitempty"`
	Epochs          int          `json:"epochs,omitempty"`
	Temperature     float64      `json:"temperature,omitempty"`
	Sigma           float64      `json:"sigma,omitempty"`
	Delta           float64      `json:"delta,omitempty"`
	AlignAlpha      float64      `json:"align_alpha,omitempty"`
	UniformT        float64      `json:"uniform_t,omitempty"`
	QueueSize       int          `json:"queue_size,omitempty"`
	MomentumEMA     float64      `json:"momentum_ema,omitempty"`
	Symmetric       bool         `json:"symmetric,omitempty"`
	BNSplits        int          `json:"bn_splits,omitempty"`
	PredictorHidden int          `json:"predictor_hidden,omitempty"`
	LR              float64      `json:"lr,omitempty"`
	Momentum        *float64     `json:"momentum,omitempty"`
	WeightDecay     *float64     `json:"weight_decay,omitempty"`
	WarmupEpochs    int          `json:"warmup_epochs,omitempty"`
	Optimizer       string       `json:"optimizer,omitempty"`
	Backend         string       `json:"backend,omitempty"`
	Precision       string       `json:"precision,omitempty"`
	Seed            uint64       `json:"seed,omitempty"`
	CheckpointEvery int          `json:"checkpoint_every,omitempty"`
	Normalization   string       `json:"normalization,omitempty"`
	DCLWGrad        *bool        `json:"dclw_grad,omitempty"`
	Seeds           []uint64     `json:"seeds,omitempty"`
	Paper           PaperFigures `json:"paper,omitempty"`
}

// TestRunJSONIsUnchanged: every run of every shipped experiment, and runs setting every
// parameter, write the JSON the one-field-per-parameter RunConfig wrote, byte for byte, and
// read back to the same run.
func TestRunJSONIsUnchanged(t *testing.T) {
	var runs []RunConfig
	for _, c := range shippedConfigs(t) {
		runs = append(runs, c.Runs...)
	}
	all := []any{"sigma", 0.5, "delta", 3, "align_alpha", 2, "uniform_t", 1, "queue_size", 16,
		"momentum_ema", 0.99, "symmetric", true, "bn_splits", 4, "predictor_hidden", 32}
	every := append([]any{"method", "moco", "loss", "dclw", "model", "small-cnn", "width", 8, "batch_size", 32, "epochs", 3,
		"temperature", 0.2, "lr", 0.1, "momentum", 0, "weight_decay", 1e-6, "warmup_epochs", 2, "optimizer", "lars",
		"backend", "cpu", "precision", "tf32", "seed", 1 << 60, "checkpoint_every", 7, "normalization", "idx"}, all...)
	paper := newRun("a", append([]any{"loss", "dcl", "temperature", 0.1, "lr", 0.1}, all...)...)
	paper.Paper, paper.Seeds = PaperFigures{KNNTop1: 1}, []uint64{1, 2}
	runs = append(runs, newRun("", all...), newRun("", append([]any{"lr", 0.1}, all...)...), newRun("a", "symmetric", true),
		newRun("", "momentum", 0), paper, newRun("every", every...))
	for _, r := range runs {
		got, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var legacy legacyRun
		if err := json.Unmarshal(got, &legacy); err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(legacy)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("run %s:\n got %s\nwant %s", r.Name, got, want)
		}
		var back RunConfig
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatal(err)
		}
		r.Cell = ""
		if !reflect.DeepEqual(back, r) {
			t.Errorf("run %s read back as %+v, want %+v", r.Name, back, r)
		}
	}
}

// shippedConfigs parses every built-in experiment config (experiments/*.yaml).
func shippedConfigs(t *testing.T) []*Config {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("..", "experiments", "*.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no experiments: %v", err)
	}
	var cs []*Config
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		c, err := Parse(f, p)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	return cs
}

// newRun is a run named name with settings given as name, value pairs (values as YAML
// writes them).
func newRun(name string, settings ...any) RunConfig {
	r := RunConfig{Name: name}
	for i := 0; i+1 < len(settings); i += 2 {
		r.Set(settings[i].(string), settings[i+1])
	}
	return r
}
