package reproduce

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"

	"github.com/dcl-beam/dcl-beam/analysis"
	"github.com/dcl-beam/dcl-beam/trainstep"
)

// scheduledEdit makes the tiny config one run (dcl, with its seed) and the raw-pixel
// baseline, kNN and the linear probe: every kind of dependency, in under a second a call.
func scheduledEdit(seed int) func(string) string {
	return func(s string) string {
		s = strings.Replace(s, "    - {name: infonce, loss: infonce}\n", "", 1)
		s = strings.Replace(s, "{name: dcl, loss: dcl}", fmt.Sprintf("{name: dcl, loss: dcl, seed: %d}", seed), 1)
		s = strings.Replace(s, "  npc: {batch_sizes: [8, 16], samples: 2}\n", "", 1)
		s = strings.Replace(s, "  knn_every: 1\n", "", 1)
		return strings.Replace(s, "baselines: [raw-pixels, random-init]", "baselines: [raw-pixels]", 1)
	}
}

// ran lists the stages a call ran, in order.
func ran(stages []StageRecord) []string {
	var out []string
	for _, s := range stages {
		if !s.Skipped {
			out = append(out, s.Name)
		}
	}
	return out
}

func stageNamed(t *testing.T, stages []StageRecord, name string) StageRecord {
	t.Helper()
	for _, s := range stages {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no stage %q in %v", name, stages)
	return StageRecord{}
}

func historyFiles(t *testing.T, out string) []string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(out, HistoryDir, "*.parquet"))
	return files
}

// --rerun recomputes the stages of the kinds it names and everything that depends on them,
// and nothing else; the plan says beforehand exactly what the run then does, and writes
// nothing.
func TestRerunRecomputesStagesAndWhatDependsOnThem(t *testing.T) {
	input, out := t.TempDir(), t.TempDir()
	writeBarsIDX(t, input)
	ctx := context.Background()
	if _, err := Run(ctx, parseTiny(t, input, scheduledEdit(1)), Options{Out: out}); err != nil {
		t.Fatal(err)
	}
	evalDCL := []string{"embed dcl", "knn dcl", "linear dcl"}
	evalPixels := []string{"embed raw-pixels train", "embed raw-pixels test", "knn raw-pixels", "linear raw-pixels"}
	preprocess := []string{"preprocess pretrain", "preprocess eval-train", "preprocess eval-test"}
	tests := []struct {
		give string
		want []string
	}{
		{"", nil},
		{"knn", []string{"knn dcl", "knn raw-pixels"}},
		{"linear,knn", []string{"knn dcl", "linear dcl", "knn raw-pixels", "linear raw-pixels"}},
		{"train", append([]string{"train dcl"}, evalDCL...)},
		{"evaluate", append(slices.Clone(evalDCL), evalPixels...)},
		{"all", slices.Concat(preprocess, []string{"train dcl"}, evalDCL, evalPixels)},
	}
	for _, tt := range tests {
		t.Run("rerun="+tt.give, func(t *testing.T) {
			rerun, err := ParseStages(tt.give)
			if err != nil {
				t.Fatal(err)
			}
			opts := Options{Out: out, Rerun: rerun}
			ledgerBefore, _ := os.ReadFile(filepath.Join(out, LedgerName))
			nHistory := len(historyFiles(t, out))
			plan, err := Plan(ctx, parseTiny(t, input, scheduledEdit(1)), opts)
			if err != nil {
				t.Fatal(err)
			}
			if got := ran(plan); !slices.Equal(got, tt.want) {
				t.Errorf("plan runs %q, want %q", got, tt.want)
			}
			if after, _ := os.ReadFile(filepath.Join(out, LedgerName)); !bytes.Equal(after, ledgerBefore) || len(historyFiles(t, out)) != nHistory {
				t.Errorf("the plan wrote to the run directory")
			}
			res, err := Run(ctx, parseTiny(t, input, scheduledEdit(1)), opts)
			if err != nil {
				t.Fatal(err)
			}
			if got := ran(res.Stages); !slices.Equal(got, tt.want) {
				t.Errorf("ran %q, want %q", got, tt.want)
			}
			for i := range plan {
				if plan[i].Name != res.Stages[i].Name || plan[i].Skipped != res.Stages[i].Skipped || plan[i].Reason == "" {
					t.Errorf("plan %+v, run %+v", plan[i], res.Stages[i])
				}
			}
		})
	}
}

// --rerun-on-code-change recomputes what another version made, and only that; without it
// another version's outputs are complete.
func TestRerunOnCodeChange(t *testing.T) {
	input, out := t.TempDir(), t.TempDir()
	writeBarsIDX(t, input)
	ctx := context.Background()
	call := func(version string, onChange bool) *Results {
		t.Helper()
		res, err := Run(ctx, parseTiny(t, input, scheduledEdit(1)), Options{Out: out, CodeVersion: version, RerunOnCodeChange: onChange})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	first := call("v1", false)
	all := ran(first.Stages)
	if got := ran(call("v2", false).Stages); len(got) != 0 {
		t.Errorf("v2 without the flag ran %q, want nothing", got)
	}
	second := call("v2", true)
	if got := ran(second.Stages); !slices.Equal(got, all) {
		t.Errorf("v2 with the flag ran %q, want every stage %q", got, all)
	}
	for _, s := range second.Stages {
		if !strings.Contains(s.Reason, "made by dcl v1") && !strings.Contains(s.Reason, "it depends on") {
			t.Errorf("stage %s: reason %q, want the version that made it", s.Name, s.Reason)
		}
	}
	if got := ran(call("v2", true).Stages); len(got) != 0 {
		t.Errorf("v2 again ran %q, want nothing: v2 made everything", got)
	}
	hist, err := ReadHistory(ctx, out)
	if err != nil {
		t.Fatal(err)
	}
	var versions []string
	for _, h := range hist {
		versions = append(versions, h.CodeVersion)
	}
	// The calls that ran no stage found the last reproduction's figures and added none.
	if want := []string{"v1", "v2"}; !slices.Equal(versions, want) {
		t.Errorf("history versions %q, want %q", versions, want)
	}
}

// cancelOnStage cancels a context when a stage logs that it is done: a kill at that moment.
type cancelOnStage struct {
	slog.Handler
	stage  string
	cancel context.CancelFunc
}

func (h *cancelOnStage) Enabled(context.Context, slog.Level) bool { return true }

func (h *cancelOnStage) Handle(ctx context.Context, rec slog.Record) error {
	if rec.Message == "stage done" {
		rec.Attrs(func(a slog.Attr) bool {
			if a.Key == "stage" && a.Value.String() == h.stage {
				h.cancel()
			}
			return true
		})
	}
	return h.Handler.Handle(ctx, rec)
}

func (h *cancelOnStage) WithAttrs(as []slog.Attr) slog.Handler {
	return &cancelOnStage{Handler: h.Handler.WithAttrs(as), stage: h.stage, cancel: h.cancel}
}

func (h *cancelOnStage) WithGroup(name string) slog.Handler {
	return &cancelOnStage{Handler: h.Handler.WithGroup(name), stage: h.stage, cancel: h.cancel}
}

// A re-run killed part-way (with a new seed) leaves the previous complete results in place,
// and the next call, without --rerun, finishes it: training continues from the new run's
// checkpoint, or, when it had finished, is kept while everything computed from the old
// encoder is recomputed. The figures are those of a call that was never interrupted.
func TestKilledRerunIsFinishedByTheNextCall(t *testing.T) {
	input := t.TempDir()
	writeBarsIDX(t, input)
	ctx := context.Background()
	want, err := Run(ctx, parseTiny(t, input, scheduledEdit(2)), Options{Out: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		kill      func(Options, context.CancelFunc) Options
		wantTrain string // the reason the next call gives for training
	}{
		{"during training", func(o Options, cancel context.CancelFunc) Options {
			o.Stderr, o.TrainLog = &cancelAfter{marker: `"step":10,`, cancel: cancel}, true
			return o
		}, "continuing what an earlier call that did not complete started"},
		{"after training", func(o Options, cancel context.CancelFunc) Options {
			o.Logger = slog.New(&cancelOnStage{Handler: slog.DiscardHandler, stage: "train dcl", cancel: cancel})
			return o
		}, "already redone by an earlier call that did not complete"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := t.TempDir()
			if _, err := Run(ctx, parseTiny(t, input, scheduledEdit(1)), Options{Out: out}); err != nil {
				t.Fatal(err)
			}
			results, _ := os.ReadFile(filepath.Join(out, ResultsName))
			killed, cancel := context.WithCancel(ctx)
			defer cancel()
			opts := tt.kill(Options{Out: out, Rerun: []StageKind{StageTrain}}, cancel)
			if _, err := Run(killed, parseTiny(t, input, scheduledEdit(2)), opts); !errors.Is(err, context.Canceled) {
				t.Fatalf("the killed re-run returned %v, want context.Canceled", err)
			}
			if after, _ := os.ReadFile(filepath.Join(out, ResultsName)); !bytes.Equal(after, results) {
				t.Error("the killed re-run changed results.json")
			}
			if n := len(historyFiles(t, out)); n != 1 {
				t.Errorf("%d history files after the killed re-run, want 1", n)
			}
			res, err := Run(ctx, parseTiny(t, input, scheduledEdit(2)), Options{Out: out})
			if err != nil {
				t.Fatal(err)
			}
			if got := stageNamed(t, res.Stages, "train dcl"); got.Reason != tt.wantTrain {
				t.Errorf("train: %+v, want the reason %q", got, tt.wantTrain)
			}
			for _, name := range []string{"embed dcl", "knn dcl", "linear dcl"} {
				if s := stageNamed(t, res.Stages, name); s.Skipped {
					t.Errorf("%s was skipped: %s; it was computed from the old encoder", name, s.Reason)
				}
			}
			for _, name := range []string{"preprocess pretrain", "knn raw-pixels"} {
				if s := stageNamed(t, res.Stages, name); !s.Skipped {
					t.Errorf("%s ran (%s); nothing it depends on changed", name, s.Reason)
				}
			}
			a, b := want.Runs[0], res.Runs[0]
			if a.Train.Loss != b.Train.Loss || a.KNN.Top1 != b.KNN.Top1 || a.Linear.Top1 != b.Linear.Top1 {
				t.Errorf("finished after a kill: loss %v, kNN %v, linear %v; never interrupted: %v, %v, %v",
					b.Train.Loss, b.KNN.Top1, b.Linear.Top1, a.Train.Loss, a.KNN.Top1, a.Linear.Top1)
			}
			if n := len(historyFiles(t, out)); n != 2 {
				t.Errorf("%d history files, want 2", n)
			}
			again, err := Run(ctx, parseTiny(t, input, scheduledEdit(2)), Options{Out: out})
			if err != nil {
				t.Fatal(err)
			}
			if got := ran(again.Stages); len(got) != 0 {
				t.Errorf("the call after the finished one ran %q, want nothing", got)
			}
		})
	}
}

// The history is one Parquet file per completed reproduction, with typed columns (a UTC
// timestamp, strings, a nullable paper figure) that DuckDB and pandas read as such, and an
// unreadable file in it stops the next call before any stage, naming the file.
func TestHistoryFiles(t *testing.T) {
	input, out := t.TempDir(), t.TempDir()
	writeBarsIDX(t, input)
	ctx := context.Background()
	withPaper := func(s string) string {
		return strings.Replace(scheduledEdit(1)(s), "seed: 1}", "seed: 1, paper: {knn_top1: 95.5, source: Table 1}}", 1)
	}
	clock := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	for i := range 2 {
		now := clock.Add(time.Duration(i) * 24 * time.Hour)
		var rerun []StageKind
		if i > 0 {
			rerun = []StageKind{StageKNN} // a reproduction of its own, not the first again
		}
		if _, err := Run(ctx, parseTiny(t, input, withPaper), Options{Out: out, CodeVersion: "v1", Now: func() time.Time { return now }, Rerun: rerun}); err != nil {
			t.Fatal(err)
		}
	}
	hist, err := ReadHistory(ctx, out)
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != 2 || !hist[0].Time.Equal(clock) || hist[1].Time.Sub(hist[0].Time) != 24*time.Hour {
		t.Fatalf("history %+v: want two reproductions a day apart from %v", hist, clock)
	}
	var metricNames []string
	for _, r := range hist[1].Rows {
		metricNames = append(metricNames, r.Metric)
		if r.Run != "dcl" || r.CodeVersion != "v1" || r.Experiment != "tiny" || r.ConfigFingerprint == "" {
			t.Errorf("row %+v", r)
		}
		if (r.Paper != nil) != (r.Metric == "knn_top1") || (r.Paper != nil && *r.Paper != 95.5) {
			t.Errorf("row %s: paper %v, want 95.5 for knn_top1 only", r.Metric, r.Paper)
		}
	}
	if want := MetricNames(); !slices.Equal(metricNames, want) {
		t.Errorf("metrics %q, want %q", metricNames, want)
	}

	data, err := os.ReadFile(historyFiles(t, out)[0])
	if err != nil {
		t.Fatal(err)
	}
	pf, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	col := func(name string) parquet.Node {
		f, ok := pf.Schema().Lookup(name)
		if !ok {
			t.Fatalf("no column %s in %s", name, pf.Schema())
		}
		return f.Node
	}
	lt := col("time").Type().LogicalType()
	if ts, ok := lt.Value.(*format.TimestampType); !ok || !ts.IsAdjustedToUTC {
		t.Errorf("time column: logical type %v, want a UTC timestamp", lt)
	} else if _, ok := ts.Unit.Value.(*format.MilliSeconds); !ok {
		t.Errorf("time column: unit %v, want milliseconds", &ts.Unit)
	}
	for _, name := range []string{"code_version", "config_fingerprint", "experiment", "run", "metric"} {
		if lt := col(name).Type().LogicalType(); lt == nil {
			t.Errorf("%s column: no logical type, want a string", name)
		} else if _, ok := lt.Value.(*format.StringType); !ok {
			t.Errorf("%s column: logical type %v, want a string", name, lt)
		}
	}
	if !col("paper").Optional() || col("value").Type().Kind() != parquet.Double {
		t.Errorf("paper %v, value %v: want an optional paper column and double values", col("paper"), col("value").Type())
	}

	bogus := filepath.Join(out, HistoryDir, "20260101T000000.000Z.parquet")
	if err := os.WriteFile(bogus, []byte("not parquet"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Run(ctx, parseTiny(t, input, withPaper), Options{Out: out})
	if err == nil || !strings.Contains(err.Error(), bogus) {
		t.Errorf("Run with a corrupt history file = %v, want an error naming %s", err, bogus)
	}
}

// compare sets the changes since the previous reproduction and applies each gate in the
// metric's direction: accuracy may not fall, loss may not rise, by more than allowed.
func TestGates(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	run := func(knn, loss float64, paper float64) RunResult {
		r := RunResult{Config: RunConfig{Name: "a"}, Paper: PaperFigures{KNNTop1: paper}}
		r.Train = &trainstep.Summary{Loss: loss}
		r.KNN = &analysis.KNNResult{Top1: knn}
		return r
	}
	prev := &Reproduction{Rows: []HistoryRow{{Run: "a", Metric: "knn_top1", Value: 80}, {Run: "a", Metric: "train_loss", Value: 2}}}
	tests := []struct {
		name    string
		gates   map[string]Gate
		now     RunResult
		prev    *Reproduction
		want    []string // the failed gates, as metric/against
		checked int
	}{
		{"no gates", nil, run(70, 3, 0), prev, nil, 0},
		{"drop within the bound", map[string]Gate{"knn_top1": {MaxDropVsPrevious: f(1)}}, run(79.5, 2, 0), prev, nil, 1},
		{"drop exactly the bound", map[string]Gate{"knn_top1": {MaxDropVsPrevious: f(1)}}, run(79, 2, 0), prev, nil, 1},
		{"drop beyond the bound", map[string]Gate{"knn_top1": {MaxDropVsPrevious: f(1)}}, run(78.9, 2, 0), prev, []string{"knn_top1/previous"}, 1},
		{"a rise passes a zero bound", map[string]Gate{"knn_top1": {MaxDropVsPrevious: f(0)}}, run(85, 2, 0), prev, nil, 1},
		{"loss rising fails", map[string]Gate{"train_loss": {MaxDropVsPrevious: f(0.1)}}, run(80, 2.2, 0), prev, []string{"train_loss/previous"}, 1},
		{"loss falling passes", map[string]Gate{"train_loss": {MaxDropVsPrevious: f(0)}}, run(80, 1, 0), prev, nil, 1},
		{"first reproduction: nothing to compare", map[string]Gate{"knn_top1": {MaxDropVsPrevious: f(0)}}, run(10, 2, 0), nil, nil, 0},
		{"below the paper", map[string]Gate{"knn_top1": {MaxDropVsPaper: f(2)}}, run(80, 2, 83), prev, []string{"knn_top1/paper"}, 1},
		{"no paper figure for the run", map[string]Gate{"knn_top1": {MaxDropVsPaper: f(2)}}, run(80, 2, 0), prev, nil, 0},
		{"both", map[string]Gate{"knn_top1": {MaxDropVsPrevious: f(0), MaxDropVsPaper: f(0)}}, run(79, 2, 90), prev, []string{"knn_top1/previous", "knn_top1/paper"}, 2},
		{"a figure that is not a number fails", map[string]Gate{"knn_top1": {MaxDropVsPrevious: f(100)}}, run(math.NaN(), 2, 0), prev, []string{"knn_top1/previous"}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := &Results{Runs: []RunResult{tt.now}}
			compare(&Config{Gates: tt.gates}, res, tt.prev)
			var failed []string
			for _, g := range res.FailedGates() {
				failed = append(failed, g.Metric+"/"+g.Against)
				if !strings.Contains(g.String(), "FAILED") || !strings.Contains(g.String(), "run a") {
					t.Errorf("message %q", g.String())
				}
			}
			if !slices.Equal(failed, tt.want) || len(res.Gates) != tt.checked {
				t.Errorf("failed %q of %d checks, want %q of %d", failed, len(res.Gates), tt.want, tt.checked)
			}
			if len(res.Changes) != 3 || (tt.prev != nil) != (res.Changes[0].Previous != nil) { // kNN top-1 and top-5, loss
				t.Errorf("changes %+v", res.Changes)
			}
		})
	}
}

// A second reproduction on a locked run directory fails at once, naming the holder, or
// waits for it; waiting ends with the context.
func TestRunDirectoryLock(t *testing.T) {
	out := t.TempDir()
	ctx := context.Background()
	release, err := lockRunDir(ctx, out, DatasetConfig{}, false, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	_, err = lockRunDir(ctx, out, DatasetConfig{}, false, slog.New(slog.DiscardHandler))
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) || !strings.Contains(err.Error(), out) {
		t.Errorf("second lock = %v, want ErrLocked naming this process and %s", err, out)
	}
	if _, err := Run(ctx, &Config{Name: "x"}, Options{Out: out}); !errors.Is(err, ErrLocked) {
		t.Errorf("Run on a locked run directory = %v, want ErrLocked", err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := lockRunDir(short, out, DatasetConfig{}, true, slog.New(slog.DiscardHandler)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("waiting past the deadline = %v, want context.DeadlineExceeded", err)
	}
	got := make(chan error, 1)
	go func() {
		release2, err := lockRunDir(ctx, out, DatasetConfig{}, true, slog.New(slog.DiscardHandler))
		if err == nil {
			release2()
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("the waiting lock returned %v while the first was held", err)
	case <-time.After(300 * time.Millisecond):
	}
	release()
	select {
	case err := <-got:
		if err != nil {
			t.Errorf("the waiting lock = %v after the release", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting lock was not taken within 10 s of the release")
	}
}

func TestParseStages(t *testing.T) {
	tests := []struct {
		give    string
		want    []StageKind
		wantErr string
	}{
		{"", nil, ""},
		{"train", []StageKind{StageTrain}, ""},
		{"train,evaluate", []StageKind{StageEmbed, StageKNN, StageLinear, StageNPC, StageTrain}, ""},
		{"knn, knn", []StageKind{StageKNN}, ""},
		{"all", []StageKind{StageEmbed, StageKNN, StageLinear, StageNPC, StagePreprocess, StageTrain}, ""},
		{"trian", nil, `unknown stage "trian"`},
		{"train,", nil, `unknown stage ""`},
	}
	for _, tt := range tests {
		got, err := ParseStages(tt.give)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseStages(%q) = %v, want an error with %q", tt.give, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("ParseStages(%q) = %v, %v; want %v", tt.give, got, err, tt.want)
		}
	}
}
