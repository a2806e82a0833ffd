package reproduce

import (
	"testing"
	"time"
)

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
