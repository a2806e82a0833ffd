package trainstep

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/progress"
	"github.com/dcl-beam/dcl-beam/internal/tensorboard"
	"github.com/dcl-beam/dcl-beam/internal/testing/tbtest"
)

// readEventFiles decodes every event file of a run, oldest first.
func readEventFiles(t *testing.T, out string) [][]tbtest.Event {
	t.Helper()
	dir := filepath.Join(out, tensorboard.Dir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var files [][]tbtest.Event
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), tensorboard.NamePrefix) {
			t.Errorf("%s: not an event file name", e.Name())
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		events, err := tbtest.Events(data)
		if err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		files = append(files, events)
	}
	return files
}

// TestTrainWritesTensorBoard: every step's loss, lr, mean_q and images/s (under train/), and
// the monitor's measurements after monitored epochs (under knn/), equal the JSON log's (to
// float32); a resumed run adds a file that starts with a session restart at its first step.
func TestTrainWritesTensorBoard(t *testing.T) {
	pairs := syntheticPairs(1, 22, 3, 6, 6, 1) // 5 steps per epoch at batch 4
	src := mustMemorySource(t, pairs)
	ctx := context.Background()
	out := t.TempDir()
	run := testRunConfig(t, out)
	run.MaxSteps, run.MonitorEvery = 3, 1
	opts := quietOptions(t, src)
	opts.Monitor = func(_ context.Context, epoch int, _ *Step, _ *progress.Reporter) (map[string]any, error) {
		return map[string]any{"knn_top1": 50 + float64(epoch), "knn_top5": 90.5, "knn_k": 200}, nil
	}
	if _, err := Train(ctx, testStepConfig(MLP), run, opts); err != nil {
		t.Fatal(err)
	}
	run.MaxSteps = 0
	opts.Resume = out
	if _, err := Train(ctx, testStepConfig(MLP), run, opts); err != nil {
		t.Fatal(err)
	}

	files := readEventFiles(t, out)
	if len(files) != 2 {
		t.Fatalf("%d event files, want one per run (2)", len(files))
	}
	if files[1][0].Step != 4 || files[1][1].SessionStatus != 1 || files[1][1].Step != 4 {
		t.Errorf("resumed run's file starts %+v, %+v: want a session START at step 4, the first it logs", files[1][0], files[1][1])
	}
	steps := map[int64]map[string]float32{}
	for _, events := range files {
		if events[0].FileVersion != tensorboard.FileVersion {
			t.Errorf("first event %+v has no file_version", events[0])
		}
		for _, ev := range events {
			if len(ev.Tags) == 0 {
				continue
			}
			if steps[ev.Step] == nil {
				steps[ev.Step] = map[string]float32{}
			}
			for tag, v := range ev.Scalars {
				steps[ev.Step][tag] = v
			}
		}
	}

	logData, err := os.ReadFile(filepath.Join(out, LogName))
	if err != nil {
		t.Fatal(err)
	}
	for i, line := range strings.Split(strings.TrimSpace(string(logData)), "\n") {
		var l map[string]any
		mustUnmarshal(t, line, &l)
		step := int64(l["step"].(float64))
		keys := []string{"loss", "lr", "mean_q", "images_per_s"}
		group := "train/"
		if _, ok := l["knn_top1"]; ok {
			keys, group = []string{"top1", "top5"}, "knn/"
		}
		for _, key := range keys {
			tag := group + key
			logKey := key
			if group == "knn/" {
				logKey = "knn_" + key
			}
			got, ok := steps[step][tag]
			want := float32(l[logKey].(float64))
			if !ok || got != want {
				t.Errorf("log line %d (step %d): %s = %v in TensorBoard (present %v), %v in the log", i, step, tag, got, ok, want)
			}
		}
	}
	if len(steps) != 10 {
		t.Errorf("TensorBoard has scalars at %d steps, want 10", len(steps))
	}
	if tags := slices.Sorted(maps.Keys(steps[5])); strings.Join(tags, ",") != "knn/top1,knn/top5,train/images_per_s,train/loss,train/lr,train/mean_q" {
		t.Errorf("step 5 (end of epoch 1) has tags %v: want the step's and the monitor's, not knn_k", tags)
	}
}

// TestTensorBoardResumeIsExact: a run killed after its last checkpoint logged steps beyond it;
// resumed, TensorBoard's loader (both its rules for a session START) shows every step once,
// with the value the uninterrupted run logged.
func TestTensorBoardResumeIsExact(t *testing.T) {
	src := mustMemorySource(t, syntheticPairs(7, 12, 2, 4, 4, 1))
	ctx := context.Background()
	whole := t.TempDir()
	if _, err := Train(ctx, testStepConfig(MLP), testRunConfig(t, whole), quietOptions(t, src)); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	run := testRunConfig(t, out)
	run.MaxSteps, run.CheckpointEvery, run.KeepCheckpoints = 3, 2, 0
	if _, err := Train(ctx, testStepConfig(MLP), run, quietOptions(t, src)); err != nil {
		t.Fatal(err)
	}
	// The kill: step 3 was logged, its checkpoint never written.
	if err := os.Remove(filepath.Join(out, CheckpointDir, CheckpointName(3))); err != nil {
		t.Fatal(err)
	}
	run.MaxSteps = 0
	opts := quietOptions(t, src)
	opts.Resume = out
	if _, err := Train(ctx, testStepConfig(MLP), run, opts); err != nil {
		t.Fatal(err)
	}
	want := tbtest.Load(readEventFiles(t, whole), false)["train/loss"]
	if len(want) != 6 {
		t.Fatalf("the uninterrupted run shows %d loss points, want 6", len(want))
	}
	for _, ignoreFirstStart := range []bool{false, true} {
		got := tbtest.Load(readEventFiles(t, out), ignoreFirstStart)["train/loss"]
		if !slices.Equal(got, want) {
			t.Errorf("loader ignoring the first START %v: the resumed run shows %v, the uninterrupted one %v", ignoreFirstStart, got, want)
		}
	}
}
