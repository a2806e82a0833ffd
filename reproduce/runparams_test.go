package reproduce

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/registry"
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
	all := registry.Values{"sigma": 0.5, "delta": 3, "align_alpha": 2, "uniform_t": 1, "queue_size": 16,
		"momentum_ema": 0.99, "symmetric": 1, "bn_splits": 4, "predictor_hidden": 32}
	runs = append(runs, RunConfig{Params: all}, RunConfig{Params: all, LR: 0.1}, RunConfig{Name: "a", Params: registry.Values{"symmetric": 1}},
		RunConfig{Name: "a", Loss: "dcl", Temperature: 0.1, Params: all, LR: 0.1, Paper: PaperFigures{KNNTop1: 1}})
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
