package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dcl-beam/dcl-beam/internal/guard"
	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/internal/testing/pipelinetest"
	"github.com/dcl-beam/dcl-beam/reproduce"
)

func TestReproduceCommandLineErrors(t *testing.T) {
	dir := t.TempDir()
	unknownKey := filepath.Join(dir, "unknown-key.yaml")
	os.WriteFile(unknownKey, []byte("name: x\nbogus: 1\n"), 0o644)
	badBeam := filepath.Join(dir, "bad-beam.yaml")
	os.WriteFile(badBeam, []byte(`name: bad-beam
dataset: {name: idx, input: /nowhere}
preprocess: {augment: simclr-cifar, passes: 1, beam_flags: ["--not_a_beam_flag=1"]}
train: {defaults: {model: small-cnn, epochs: 1, batch_size: 8, temperature: 0.1}, runs: [{name: a, loss: dcl}]}
`), 0o644)
	fifo := filepath.Join(dir, "config.fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		give []string
		want string
	}{
		{[]string{"reproduce"}, "--config is required"},
		{[]string{"reproduce", "--config=" + fifo}, "--config=" + fifo + ": not a regular file (p"},
		{[]string{"reproduce", "--config=" + dir}, "not a regular file (d"},
		{[]string{"reproduce", "--config=no-such-experiment"}, "no built-in config of that name"},
		{[]string{"reproduce", "--config=" + unknownKey}, "field bogus not found"},
		{[]string{"reproduce", "--config=" + badBeam, "--output=" + dir}, `"--not_a_beam_flag=1" is not a Beam flag`},
		{[]string{"reproduce", "--config=demo-fashion-mnist", "--output=" + filepath.Join(dir, "planned"), "--plan", "--restore-state=" + unknownKey}, "--plan with --restore-state"},
	}
	for _, tt := range tests {
		code, _, stderr := runDCL(tt.give...)
		if code != exitUsage || !strings.Contains(stderr, tt.want) {
			t.Errorf("dcl %q = %d, %q; want exit 2 and %q", tt.give, code, stderr, tt.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "planned")); !os.IsNotExist(err) {
		t.Errorf("a refused --plan wrote its --output: %v", err)
	}
}

// Without the Debian package the demo says how to get the data, and how to point at a copy.
func TestDemoWithoutDataSaysWhatToDo(t *testing.T) {
	code, _, stderr := runDCL("demo", "--input="+t.TempDir(), "--output="+t.TempDir())
	if code != exitError {
		t.Fatalf("dcl demo without data exited %d, want %d", code, exitError)
	}
	for _, want := range []string{"apt-get install dataset-fashion-mnist", "--input=PATH"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("dcl demo printed %q, want it to mention %q", stderr, want)
		}
	}
}

// Every built-in experiment is listed in dcl reproduce -h, so people can find them.
func TestReproduceHelpListsTheBuiltInExperiments(t *testing.T) {
	code, out, _ := runDCL("reproduce", "-h")
	if code != exitOK {
		t.Fatalf("dcl reproduce -h exited %d", code)
	}
	for _, name := range []string{"demo-fashion-mnist", "cifar10-batch-size", "imagenet-batch-size", "cifar10-temperature"} {
		if !strings.Contains(out, name) {
			t.Errorf("dcl reproduce -h does not list %s", name)
		}
	}
	for _, want := range []string{"Exit status: 0", "1 a stage failed", "2 bad command line or config", "3 a gate failed"} {
		if !strings.Contains(out, want) {
			t.Errorf("dcl reproduce -h does not document the exit status: no %q", want)
		}
	}
}

// nightlyConfig is a whole experiment in about a second: one DCL run of a narrow small CNN
// on 128 IDX images and kNN, with gates that allow no drop of kNN accuracy or rise of the
// training loss since the previous reproduction.
const nightlyConfig = `name: nightly
dataset: {name: idx, input: INPUT, image_size: 16}
preprocess: {augment: simclr-cifar, passes: 1, seed: 7}
train:
  defaults: {model: small-cnn, width: 4, epochs: 1, batch_size: 16, temperature: 0.2, lr: 0.3, backend: cpu}
  runs: [{name: dcl, loss: dcl, seed: SEED}]
evaluate:
  knn: {k: 10, temperature: 0.1}
gates:
  knn_top1: {max_drop_vs_previous: 0}
  train_loss: {max_drop_vs_previous: 0}
`

// nightly writes the data and returns a function that writes the config with a run's seed
// and returns its path.
func nightly(t *testing.T) (config func(seed int) string) {
	t.Helper()
	input, dir := t.TempDir(), t.TempDir()
	pipelinetest.WriteIDX(t, input, "train", 128, false)
	pipelinetest.WriteIDX(t, input, "test", 64, false)
	return func(seed int) string {
		p := filepath.Join(dir, fmt.Sprintf("nightly-seed%d.yaml", seed))
		text := strings.NewReplacer("INPUT", input, "SEED", strconv.Itoa(seed)).Replace(nightlyConfig)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
}

// How scheduled reproductions are judged: the first reproduction and a rerun that changes
// nothing say that they checked no gate, then the same experiment is reproduced again with
// --rerun=train after a change to a run's seed. The history holds every reproduction, the
// report shows what changed, and a gate tighter than the change makes dcl exit 3 with every
// output written. The figures move one way or the other; if none got worse with seed 2,
// going back to seed 1 makes them worse by as much (training is deterministic).
func TestScheduledReproductionFailsItsGate(t *testing.T) {
	config, out := nightly(t), t.TempDir()
	call := func(seed int, flags ...string) (int, string, string) {
		return runDCL(append([]string{"reproduce", "--config=" + config(seed), "--output=" + out, "--log-level=warn", "--progress=off"}, flags...)...)
	}
	// With nothing to compare with, the first reproduction and a rerun that changes nothing
	// check no gate: they pass --gate, saying so, not in silence.
	for _, want := range []string{"this is the first reproduction", "this call ran no stage and repeats the only reproduction"} {
		code, _, stderr := call(1, "--gate")
		if code != exitOK {
			t.Fatalf("reproduction with nothing to compare with exited %d: %s", code, stderr)
		}
		report, err := os.ReadFile(filepath.Join(out, reproduce.ReportName))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(stderr, "dcl: warning: no gate was checked") || !strings.Contains(stderr, "gates.knn_top1.max_drop_vs_previous not checked (run dcl): "+want) ||
			!strings.Contains(string(report), "Gates: **none checked**") {
			t.Errorf("a reproduction that checked no gate (%s) does not say so: stderr %q, report:\n%s", want, stderr, report)
		}
	}
	for i, seed := range []int{2, 1} {
		start := time.Now()
		code, _, stderr := call(seed, "--rerun=train", "--gate")
		if code != exitOK && code != exitGate {
			t.Fatalf("reproduction with seed %d exited %d: %s", seed, code, stderr)
		}
		hist, err := reproduce.ReadHistory(context.Background(), out)
		if err != nil {
			t.Fatal(err)
		}
		if len(hist) != i+2 || hist[i].ConfigFingerprint == hist[i+1].ConfigFingerprint {
			t.Fatalf("%d reproductions in the history, want %d with the config's fingerprint changed", len(hist), i+2)
		}
		var res reproduce.Results
		if err := storage.LoadJSON(context.Background(), filepath.Join(out, reproduce.ResultsName), &res); err != nil {
			t.Fatal(err)
		}
		if res.HistoryFile != hist[i+1].File || res.Time.Before(start.Add(-time.Second)) {
			t.Errorf("results.json is of %s at %v, want this reproduction's (%s)", res.HistoryFile, res.Time, hist[i+1].File)
		}
		report, err := os.ReadFile(filepath.Join(out, reproduce.ReportName))
		if err != nil {
			t.Fatal(err)
		}
		row := reportRow(string(report), "dcl", "train_loss")
		t.Logf("seed %d: exit %d; kNN top-1 %q, loss %q", seed, code, reportRow(string(report), "dcl", "knn_top1"), row)
		if len(row) < 5 || row[2] == "—" || row[4] == "—" || row[4] == "0" {
			t.Errorf("report row for dcl's loss = %q, want its previous and new values and a change", row)
		}
		if info, err := os.Stat(filepath.Join(out, reproduce.PlotsDir, reproduce.TrendPlotName)); err != nil || info.ModTime().Before(start) {
			t.Errorf("trend plot: %v, want one drawn by this reproduction", err)
		}
		if code == exitOK {
			if len(res.FailedGates()) != 0 {
				t.Errorf("exit 0 with failed gates %v", res.FailedGates())
			}
			continue
		}
		if len(res.FailedGates()) == 0 || !strings.Contains(stderr, "gates failed (everything was written)") || !strings.Contains(string(report), "FAILED") {
			t.Errorf("exit 3: results.json gates %v, stderr %q; want the failures in both and in the report", res.Gates, stderr)
		}
		return
	}
	t.Fatal("no gate failed: with seed 2 and back with seed 1, neither kNN top-1 nor the loss got worse")
}

// A reproduction's Beam stages write the same bytes each time they run at one path: the
// comparison the Flink test makes between prism's reproduction and Flink's (sameBeamOutputs),
// here between two of prism's, so that a comparison that no runner could pass fails here, in
// every test run, rather than only where Flink is.
func TestReproductionBeamOutputsRepeat(t *testing.T) {
	config, dir := nightly(t)(1), t.TempDir()
	out, first := filepath.Join(dir, "reproduce"), filepath.Join(dir, "first")
	for i := range 2 {
		if code, _, stderr := runDCL("reproduce", "--config="+config, "--output="+out, "--log-level=warn", "--progress=off"); code != exitOK {
			t.Fatalf("reproduction %d exited %d: %s", i+1, code, stderr)
		}
		if i == 0 {
			moveAside(t, out, first)
		}
	}
	sameBeamOutputs(t, first, out)
}

// reportRow returns the cells of the report's changes-table row of a run and metric.
func reportRow(report, run, metric string) []string {
	for _, line := range strings.Split(report, "\n") {
		cells := strings.Split(strings.Trim(line, "| "), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if len(cells) > 2 && cells[0] == run && cells[1] == metric {
			return cells
		}
	}
	return nil
}

// --plan says what a run would do and does nothing; a run directory in use is refused with
// a message that says how to wait; a bad --rerun or --pack is a command-line error, --rerun
// of a run the config lacks is refused; the plan says which runs train together.
func TestReproducePlanLockAndRerunFlags(t *testing.T) {
	config := nightly(t)(1)
	out := filepath.Join(t.TempDir(), "run")
	code, stdout, stderr := runDCL("reproduce", "--config="+config, "--output="+out, "--plan", "--log-level=warn")
	if code != exitOK || !regexp.MustCompile(`(?m)^run +train dcl +it depends on preprocess pretrain`).MatchString(stdout) || !strings.Contains(stdout, "6 of 6 stages would run") {
		t.Errorf("--plan exited %d with %q (%s); want every stage listed to run", code, stdout, stderr)
	}
	if _, err := os.Stat(out); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("--plan created %s (%v)", out, err)
	}
	// A run folder started with other settings: the plan shows the refusal where a run would
	// stop, and exits as the run would.
	record := filepath.Join(out, "runs", "dcl", "run.json")
	if err := os.MkdirAll(filepath.Dir(record), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(record, []byte(`{"name": "dcl", "epochs": 99}`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = runDCL("reproduce", "--config="+config, "--output="+out, "--plan", "--log-level=warn")
	if code != exitError || !regexp.MustCompile(`(?m)^REFUSE +train dcl +.*run.json was started with other settings .*epochs: 99 → `).MatchString(stdout) ||
		!strings.Contains(stdout, "A run would stop at train dcl") || !strings.Contains(stderr, "a run would stop at train dcl") {
		t.Errorf("--plan on a run folder of other settings exited %d with %q (%s); want the plan with the refusal, and 1", code, stdout, stderr)
	}
	if err := os.RemoveAll(out); err != nil {
		t.Fatal(err)
	}

	if !strings.Contains(stdout, "Training (pack: auto): 0 pack(s)") || !strings.Contains(stdout, "alone: dcl (") {
		t.Errorf("--plan does not say how the runs train: %q", stdout)
	}
	code, stdout, stderr = runDCL("reproduce", "--config="+config, "--output="+out, "--plan", "--pack=off", "--log-level=warn")
	if code != exitOK || !strings.Contains(stdout, "Training (pack: off)") || !strings.Contains(stdout, "): pack: off") {
		t.Errorf("--plan --pack=off exited %d with %q (%s)", code, stdout, stderr)
	}
	code, _, stderr = runDCL("reproduce", "--config="+config, "--output="+out, "--plan", "--pack=many")
	if code != exitUsage || !strings.Contains(stderr, `invalid value "many" for flag --pack`) {
		t.Errorf("--pack=many exited %d: %q; want 2 and the bad value", code, stderr)
	}

	code, _, stderr = runDCL("reproduce", "--config="+config, "--output="+out, "--rerun=trian")
	if code != exitUsage || !strings.Contains(stderr, `unknown stage "trian"`) {
		t.Errorf("--rerun=trian exited %d: %q; want 2 and the unknown stage", code, stderr)
	}
	code, _, stderr = runDCL("reproduce", "--config="+config, "--output="+out, "--plan", "--rerun=train nosuch")
	if code == exitOK || !strings.Contains(stderr, "the config has no run nosuch") {
		t.Errorf("--rerun='train nosuch' exited %d: %q; want the missing run", code, stderr)
	}

	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	release, err := guard.Acquire(t.Context(), guard.Claim{Command: "dcl reproduce", Outputs: []guard.Path{{Path: out}}})
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	code, _, stderr = runDCL("reproduce", "--config="+config, "--output="+out, "--log-level=warn")
	if code != exitError || !strings.Contains(stderr, "another dcl command is writing "+out+": dcl reproduce (pid") || !strings.Contains(stderr, "--wait-lock") {
		t.Errorf("dcl reproduce on a locked run directory exited %d: %q; want 1, the reason and --wait-lock", code, stderr)
	}
}
