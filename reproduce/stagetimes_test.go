package reproduce

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"testing"
	"time"
)

var update = flag.Bool("update-stages", false, "rewrite BENCHMARKS.md's GPU stage table from docs/gpu/reproduce-stages.json")

// The GPU stage table in BENCHMARKS.md is generated: StageTimesMarkdown of the stage times
// scripts/gpu-check.sh OUT eval wrote on a GPU, copied to docs/gpu/reproduce-stages.json.
const (
	stageTimesJSON    = "../docs/gpu/reproduce-stages.json"
	benchmarksFile    = "../BENCHMARKS.md"
	stageTableBegin   = "<!-- reproduce-stages: generated from docs/gpu/reproduce-stages.json by `go test ./reproduce -run TestBenchmarksStageTable -update-stages`; do not edit -->\n"
	stageTableEnd     = "<!-- /reproduce-stages -->"
	stageTablePending = "No GPU run yet: `scripts/gpu-check.sh OUT eval` on a GPU machine writes `OUT/reproduce-stages.json`.\n"
)

// TestBenchmarksStageTable checks that BENCHMARKS.md's GPU stage table is what the generator
// makes of docs/gpu/reproduce-stages.json (when the file exists; until then, the section says
// none was run), and with -update rewrites it.
func TestBenchmarksStageTable(t *testing.T) {
	md, err := os.ReadFile(benchmarksFile)
	if err != nil {
		t.Fatal(err)
	}
	begin, end := bytes.Index(md, []byte(stageTableBegin)), bytes.Index(md, []byte(stageTableEnd))
	if begin < 0 || end < begin {
		t.Fatalf("%s has no section between %q and %q", benchmarksFile, stageTableBegin, stageTableEnd)
	}
	want := stageTablePending
	if raw, err := os.ReadFile(stageTimesJSON); err == nil {
		var st StageTimes
		if err := json.Unmarshal(raw, &st); err != nil {
			t.Fatalf("%s: %v", stageTimesJSON, err)
		}
		want = StageTimesMarkdown(st)
	} else if !os.IsNotExist(err) {
		t.Fatal(err)
	}
	got := string(md[begin+len(stageTableBegin) : end])
	if got == want {
		return
	}
	if !*update {
		t.Fatalf("BENCHMARKS.md's GPU stage table is not what %s gives; run go test ./reproduce -run TestBenchmarksStageTable -update-stages\ngot:\n%s\nwant:\n%s", stageTimesJSON, got, want)
	}
	out := append(append(append([]byte{}, md[:begin+len(stageTableBegin)]...), want...), md[end:]...)
	if err := os.WriteFile(benchmarksFile, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestStageTimesMarkdown pins the generator's table: every stage with its rate (a dash
// where it has none), the time of each kind of stage and the evaluation's share of the wall.
func TestStageTimesMarkdown(t *testing.T) {
	rate := func(v float64) *float64 { return &v }
	st := StageTimes{
		Experiment: "fashion-mnist-gpu-eval", ConfigFingerprint: "abc123", CodeVersion: "v1", Time: time.Date(2026, 11, 27, 1, 2, 3, 0, time.UTC),
		GPU: "NVIDIA H200", CPU: "Intel Xeon, 16 cores, avx512", Backend: "cuda", Runner: "prism", Wall: 200,
		Config: &Config{Runs: []RunConfig{newRun("dcl-b32", "model", "resnet18-cifar", "batch_size", 32, "epochs", 4)}},
		Stages: []StageTime{
			{Stage: "preprocess pretrain", Seconds: 10},
			{Stage: "train dcl-b32", Seconds: 100, ImagesPerS: rate(19200.4), Images: 1920040},
			{Stage: "embed dcl-b32", Seconds: 10, ImagesPerS: rate(19000), Images: 190000},
			{Stage: "knn dcl-b32", Seconds: 5, ImagesPerS: rate(2000), Images: 10000},
			{Stage: "linear dcl-b32", Seconds: 20},
			{Stage: "npc dcl-b32", Seconds: 5},
			{Stage: "initialise random-init", Seconds: 1},
		},
	}
	want := "`fashion-mnist-gpu-eval` (config abc123), dcl v1, 2026-11-27: GPU NVIDIA H200; CPU Intel Xeon, 16 cores, avx512; backend cuda; Beam runner prism; wall 200 s.\n\n" +
		"Runs: dcl-b32 (resnet18-cifar, batch 32, 4 epochs).\n\n" +
		"| stage | seconds | images/s |\n|---|---:|---:|\n" +
		"| preprocess pretrain | 10.0 | — |\n| train dcl-b32 | 100.0 | 19200 |\n| embed dcl-b32 | 10.0 | 19000 |\n" +
		"| knn dcl-b32 | 5.0 | 2000 |\n| linear dcl-b32 | 20.0 | — |\n| npc dcl-b32 | 5.0 | — |\n| initialise random-init | 1.0 | — |\n\n" +
		"| stages | seconds | share of the wall time |\n|---|---:|---:|\n" +
		"| preprocess | 10.0 | 5% |\n| train | 101.0 | 50% |\n| embed | 10.0 | 5% |\n| knn | 5.0 | 2% |\n| linear | 20.0 | 10% |\n| npc | 5.0 | 2% |\n" +
		"| evaluation (embed, knn, linear, npc) | 40.0 | 20% |\n"
	if got := StageTimesMarkdown(st); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}
