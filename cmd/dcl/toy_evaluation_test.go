package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/registry"
	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/internal/testing/pipelinetest"
	"github.com/dcl-beam/dcl-beam/pipelines"
	"github.com/dcl-beam/dcl-beam/reproduce"
	"github.com/dcl-beam/dcl-beam/shards/embeddings"
)

// This file is the whole of an evaluation with a parameter and a metric of its own: one
// registration, and the command line's command, flag, help and check, a reproduce config's
// key, the reproduction's run of it and its metric in the results, the report, the history
// and the gates come from the declaration without another file knowing it.

// toyCentroid is nearest-class-centroid accuracy: a test vector counts as a hit when its
// class's training centroid is among the toy_top centroids nearest to it.
const toyCentroid = "toy-centroid"

// toyAccuracy is its metric.
const toyAccuracy = "toy_accuracy"

type toyCentroidResult struct {
	Top  int     `json:"top"`
	Hits int     `json:"hits"`
	N    int     `json:"n"`
	Acc  float64 `json:"accuracy"`
	Test string  `json:"test"`
}

func registerToyCentroid(t *testing.T) {
	run := func(ctx context.Context, train, test, output string, top int) (*toyCentroidResult, error) {
		sums, counts := map[int32][]float64{}, map[int32]int{}
		if err := eachRow(ctx, train, func(label int32, v []float32) {
			if sums[label] == nil {
				sums[label] = make([]float64, len(v))
			}
			for i, x := range v {
				sums[label][i] += float64(x)
			}
			counts[label]++
		}); err != nil {
			return nil, err
		}
		res := &toyCentroidResult{Top: top, Test: test}
		if err := eachRow(ctx, test, func(label int32, v []float32) {
			closer := 0 // centroids nearer than the true class's
			dist := func(c int32) float64 {
				d := 0.0
				for i, x := range v {
					d += math.Pow(float64(x)-sums[c][i]/float64(counts[c]), 2)
				}
				return d
			}
			if _, ok := sums[label]; !ok {
				res.N++
				return
			}
			own := dist(label)
			for c := range sums {
				if c != label && dist(c) < own {
					closer++
				}
			}
			res.N++
			if closer < top {
				res.Hits++
			}
		}); err != nil {
			return nil, err
		}
		res.Acc = 100 * float64(res.Hits) / float64(max(res.N, 1))
		if output != "" {
			if err := storage.SaveJSON(ctx, output, res); err != nil {
				return nil, err
			}
		}
		return res, nil
	}
	pipelines.RegisterEvaluation(pipelines.Evaluation{
		Name: toyCentroid, Summary: "toy nearest-centroid accuracy of test embeddings",
		Params: []registry.Param{
			{Name: "train", Value: registry.Text(""), Surface: registry.CommandOnly, Required: true, Doc: "training embeddings (the centroids)"},
			{Name: "test", Value: registry.Text(""), Surface: registry.CommandOnly, Required: true, Doc: "test embeddings"},
			{Name: "output", Value: registry.Text(""), Surface: registry.CommandOnly, Doc: "also write the result JSON here"},
			{Name: "toy_top", Type: registry.Int, Default: 1, Doc: "nearest centroids a hit may be among", Check: registry.AtLeast(1)},
		},
		Run: func(ctx context.Context, s registry.Settings, _ pipelines.Env) (any, error) {
			return run(ctx, s.String("train"), s.String("test"), s.String("output"), s.Int("toy_top"))
		},
		Encoder: &pipelines.EncoderEvaluation{Output: "toy-centroid.json", Result: "toy-centroid.json",
			New: func() any { return new(toyCentroidResult) },
			Run: func(ctx context.Context, e pipelines.Encoder, s registry.Settings) (any, error) {
				return run(ctx, e.Train, e.Test, e.Output, s.Int("toy_top"))
			},
			Metrics: []pipelines.Metric{{Name: toyAccuracy, Description: "toy nearest-centroid accuracy (%)", HigherIsBetter: true,
				Of: func(r any) (float64, bool) {
					v, ok := r.(*toyCentroidResult)
					if !ok || v == nil {
						return 0, false
					}
					return v.Acc, true
				}}}},
	})
	t.Cleanup(func() { pipelines.UnregisterEvaluation(toyCentroid) })
}

// eachRow calls f with each labelled row of the embeddings at path.
func eachRow(ctx context.Context, path string, f func(label int32, v []float32)) error {
	r, err := embeddings.Open(ctx, path, 0)
	if err != nil {
		return err
	}
	defer r.Close()
	for {
		b, err := r.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		for i := range b.Len() {
			if b.Labels[i] >= 0 {
				f(b.Labels[i], b.Vector(i))
			}
		}
	}
}

// TestToyEvaluationIsOneRegistration: the toy evaluation's command is listed by dcl help, its
// toy_top is a flag with its doc and default and its check (a bad value refused naming the
// flag, exit 2), the command runs and prints its result; a reproduce config takes
// evaluate.toy-centroid.toy_top, checked, and a gate on its metric; the reproduction runs it
// on each encoder's embeddings, keeps its result, and its metric is in results.json (the
// run's figures and its cell's spread), report.md, the history, and a second reproduction's
// gate against the first.
func TestToyEvaluationIsOneRegistration(t *testing.T) {
	registerToyCentroid(t)

	if _, help, _ := runDCL("help"); !strings.Contains(help, "  toy-centroid toy nearest-centroid accuracy") {
		t.Errorf("dcl help lacks the toy evaluation:\n%s", help)
	}
	_, help, _ := runDCL(toyCentroid, "-h")
	if !strings.Contains(help, "  --toy-top=int\n      nearest centroids a hit may be among (default 1)\n") {
		t.Errorf("dcl %s -h lacks --toy-top with its doc and default:\n%s", toyCentroid, help)
	}

	dir := t.TempDir()
	train, test := filepath.Join(dir, "train.parquet"), filepath.Join(dir, "test.parquet")
	writeClusterEmbeddings(t, train, []string{"cat", "dog", "car"}, 10, 0)
	writeClusterEmbeddings(t, test, []string{"cat", "dog", "car"}, 10, 0)
	for _, tc := range []struct {
		give []string
		code int
		want string
	}{
		{[]string{"--train", train}, exitUsage, "--train and --test are required"},
		{[]string{"--train", train, "--test", test, "--toy-top", "0"}, exitUsage, "--toy-top=0: toy-centroid: must be at least 1"},
		{[]string{"--train", train, "--test", test, "--toy-top", "x"}, exitUsage, "--toy-top"},
	} {
		if code, _, stderr := runDCL(append([]string{toyCentroid}, tc.give...)...); code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("dcl %s %q = %d, %q; want %d naming %q", toyCentroid, tc.give, code, stderr, tc.code, tc.want)
		}
	}
	code, stdout, stderr := runDCL(toyCentroid, "--train", train, "--test", test, "--toy-top", "3")
	if code != exitOK || !strings.Contains(stdout, `"top":3,"hits":30,"n":30,"accuracy":100`) {
		t.Errorf("dcl %s = %d: %s%s; want every test row a hit among the 3 centroids", toyCentroid, code, stdout, stderr)
	}

	// The config's key, checked as the flag is.
	input, out := t.TempDir(), t.TempDir()
	pipelinetest.WriteIDX(t, input, "train", 64, false)
	pipelinetest.WriteIDX(t, input, "test", 32, false)
	config := `name: toy
dataset: {name: idx, input: ` + input + `, image_size: 16}
preprocess: {augment: simclr-cifar, passes: 1, seed: 7}
train:
  defaults: {model: small-cnn, width: 4, epochs: 1, batch_size: 16, temperature: 0.2, lr: 0.3, backend: cpu}
  runs: [{name: dcl, loss: dcl}]
evaluate:
  toy-centroid: {toy_top: 2}
gates: {toy_accuracy: {max_drop_vs_previous: 0}}
`
	c, err := reproduce.Parse(strings.NewReader(config), "toy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := c.Evaluate.Settings(toyCentroid); !ok || s.Int("toy_top") != 2 {
		t.Errorf("evaluate.%s = %v, %v; want toy_top 2", toyCentroid, s.GivenNames(), ok)
	}
	for give, want := range map[string]string{
		"{toy_top: 0}":   "evaluate.toy-centroid.toy_top 0: must be at least 1",
		"{toy_top: 1.5}": "evaluate.toy-centroid.toy_top: 1.5 is not a whole number",
		"{toy_tops: 2}":  "evaluate.toy-centroid.toy_tops: unknown setting (want toy_top)",
		"{train: a}":     "evaluate.toy-centroid.train: unknown setting (want toy_top)",
	} {
		bad := strings.Replace(config, "{toy_top: 2}", give, 1)
		if _, err := reproduce.Parse(strings.NewReader(bad), "toy.yaml"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("evaluate.%s: %s: %v, want an error naming %q", toyCentroid, give, err, want)
		}
	}

	// The reproduction runs it on the run's embeddings and keeps its result.
	p := filepath.Join(t.TempDir(), "toy.yaml")
	if err := os.WriteFile(p, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runDCL("reproduce", "--config="+p, "--output="+out, "--log-level=warn", "--progress=off"); code != exitOK {
		t.Fatalf("dcl reproduce = %d: %s", code, stderr)
	}
	var written toyCentroidResult
	if err := storage.LoadJSON(context.Background(), filepath.Join(out, reproduce.RunsDir, "dcl", "toy-centroid.json"), &written); err != nil {
		t.Fatal(err)
	}
	if written.Top != 2 || written.N != 32 || !strings.HasSuffix(written.Test, filepath.Join("embeddings", "test")) {
		t.Errorf("the reproduction's toy result %+v, want toy_top 2 over the 32 test images' embeddings", written)
	}
	var res reproduce.Results
	if err := storage.LoadJSON(context.Background(), filepath.Join(out, reproduce.ResultsName), &res); err != nil {
		t.Fatal(err)
	}
	var kept toyCentroidResult
	if len(res.Runs) != 1 || json.Unmarshal(res.Runs[0].Others[toyCentroid], &kept) != nil || kept != written {
		t.Errorf("results.json keeps %+v, want the toy's result %+v", kept, written)
	}
	if s, ok := res.Evaluate.Settings(toyCentroid); !ok || !slices.Equal(s.GivenNames(), []string{"toy_top"}) {
		t.Errorf("results.json's evaluations lack evaluate.%s", toyCentroid)
	}

	// Its metric, in the results, the report and the history.
	i := slices.IndexFunc(res.Changes, func(c reproduce.Change) bool { return c.Metric == toyAccuracy })
	if i < 0 || res.Changes[i].Run != "dcl" || res.Changes[i].Value != written.Acc {
		t.Errorf("results.json's figures %+v lack the run's %s %v", res.Changes, toyAccuracy, written.Acc)
	}
	if len(res.Cells) != 1 || res.Cells[0].Metrics[toyAccuracy].Mean != written.Acc {
		t.Errorf("results.json's cells %+v lack the cell's %s", res.Cells, toyAccuracy)
	}
	report, err := os.ReadFile(filepath.Join(out, reproduce.ReportName))
	if err != nil {
		t.Fatal(err)
	}
	if row := fmt.Sprintf("| dcl | %s |", toyAccuracy); !strings.Contains(string(report), row) {
		t.Errorf("report.md has no row %q:\n%s", row, report)
	}
	history, err := reproduce.ReadHistory(context.Background(), out)
	if err != nil || len(history) != 1 {
		t.Fatalf("history: %d reproductions, %v", len(history), err)
	}
	if v, ok := history[0].Value("dcl", toyAccuracy); !ok || v != written.Acc {
		t.Errorf("the history holds %s %v, %v; want %v", toyAccuracy, v, ok, written.Acc)
	}

	// The gate on it, against the first reproduction: the evaluation runs again, so this is a
	// second reproduction (a call that runs no stage is the first again, and adds none).
	if code, _, stderr := runDCL("reproduce", "--config="+p, "--output="+out, "--gate", "--rerun=evaluate", "--log-level=warn", "--progress=off"); code != exitOK {
		t.Fatalf("dcl reproduce --gate, again = %d: %s", code, stderr)
	}
	if err := storage.LoadJSON(context.Background(), filepath.Join(out, reproduce.ResultsName), &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Gates) != 1 || res.Gates[0].Metric != toyAccuracy || res.Gates[0].Against != reproduce.VsPrevious ||
		res.Gates[0].Reference != written.Acc || res.Gates[0].Failed {
		t.Errorf("gates %+v, want %s against the previous reproduction's %v, passed", res.Gates, toyAccuracy, written.Acc)
	}
}
