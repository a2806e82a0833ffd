package reproduce

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// legacyEvaluate is EvaluateConfig as it was before the evaluations declared their
// parameters (one struct per evaluation): the JSON of the evaluations (fingerprints, results)
// must not change.
type legacyEvaluate struct {
	Feature string `json:"feature,omitempty"`
	KNN     *struct {
		K           int     `json:"k,omitempty"`
		Temperature float64 `json:"temperature,omitempty"`
	} `json:"knn,omitempty"`
	Linear *struct {
		Epochs    int     `json:"epochs,omitempty"`
		LR        float64 `json:"lr,omitempty"`
		BatchSize int     `json:"batch_size,omitempty"`
		Optimizer string  `json:"optimizer,omitempty"`
		// keys added since, after the old ones
		Crops      string `json:"crops,omitempty"`
		CropPasses int    `json:"crop_passes,omitempty"`
	} `json:"linear,omitempty"`
	NPC *struct {
		BatchSizes []int `json:"batch_sizes,omitempty"`
		Samples    int   `json:"samples,omitempty"`
	} `json:"npc,omitempty"`
	KNNEvery   int               `json:"knn_every,omitempty"`
	KNNMonitor *KNNMonitorConfig `json:"knn_monitor,omitempty"`
	Baselines  []string          `json:"baselines,omitempty"`
}

// TestEvaluateJSONIsUnchanged: the evaluations of every shipped experiment, and sections
// setting every key the old structs had, write the JSON the one-struct-per-evaluation
// EvaluateConfig wrote, byte for byte, and read back to the same settings.
func TestEvaluateJSONIsUnchanged(t *testing.T) {
	var evs []EvaluateConfig
	for _, c := range shippedConfigs(t) {
		evs = append(evs, c.Evaluate)
	}
	for _, y := range []string{
		"evaluate: {knn: {k: 5, temperature: 0.5}, linear: {epochs: 3, lr: 0.5, batch_size: 16, optimizer: lars}, npc: {batch_sizes: [4, 8], samples: 2}, knn_monitor: {bank: 3}}",
		"evaluate: {feature: projection, linear: {}, knn_every: 2, baselines: [raw-pixels]}",
		"evaluate: {npc: {batch_sizes: [2]}}",
		"evaluate: {}",
	} {
		c, err := Parse(strings.NewReader(minimalConfig+y), "x.yaml")
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, c.Evaluate)
	}
	for i, e := range evs {
		got, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		var legacy legacyEvaluate
		dec := json.NewDecoder(strings.NewReader(string(got)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&legacy); err != nil {
			t.Fatalf("evaluations %d: %s: %v", i, got, err)
		}
		want, err := json.Marshal(legacy)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("evaluations %d:\n got %s\nwant %s", i, got, want)
		}
		var back EvaluateConfig
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatal(err)
		}
		if again, _ := json.Marshal(back); string(again) != string(got) || !reflect.DeepEqual(back.Evaluations == nil, e.Evaluations == nil) {
			t.Errorf("evaluations %d read back as %s, want %s", i, again, got)
		}
	}
}

const minimalConfig = `
name: x
dataset: {name: idx, input: /data/fashion-mnist}
preprocess: {augment: simclr-cifar, passes: 1}
train: {defaults: {loss: dcl, model: mlp, epochs: 1, temperature: 0.1, batch_size: 4}, runs: [{name: a}]}
`
