package trainstep

import (
	"context"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/internal/testing/gcstest"
)

// TestTrainOnGCS: shards read from gs://, checkpoints, log and summary written there, a run
// stopped and resumed from its gs:// folder, and the encoder loaded from it (GCS emulator).
func TestTrainOnGCS(t *testing.T) {
	ctx := context.Background()
	bucket := gcstest.Start(t, "runs")
	data, out := bucket+"/data/train", bucket+"/runs/dcl"
	writeShards(t, data, 2, syntheticPairs(1, 12, 3, 6, 6, 1))
	src, err := OpenShards(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	run := testRunConfig(t, out)
	run.Data, run.MaxSteps, run.CheckpointEvery = data, 4, 2
	if _, err := Train(ctx, testStepConfig(MLP), run, quietOptions(t, src)); err != nil {
		t.Fatal(err)
	}
	run.MaxSteps = 0
	opts := quietOptions(t, src)
	opts.Resume = out
	sum, err := Train(ctx, testStepConfig(MLP), run, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !sum.Finished || sum.StepsDone != 6 || !strings.HasPrefix(sum.Checkpoint, out+"/checkpoints/") {
		t.Fatalf("summary %+v", sum)
	}
	log, err := storage.ReadFile(ctx, storage.Join(out, LogName))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(log), `{"step":`); n != 6 {
		t.Errorf("the log on GCS has %d step lines, want 6 (4, then 2 after the resume)", n)
	}
	if ok, err := storage.Exists(ctx, storage.Join(out, SummaryName)); !ok || err != nil {
		t.Errorf("no summary on GCS: %v", err)
	}
	enc, err := LoadEncoder(ctx, newTestBackend(t), out)
	if err != nil {
		t.Fatal(err)
	}
	enc.Close()
}
