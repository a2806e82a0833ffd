package trainstep

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/shards"
	"github.com/dcl-beam/dcl-beam/transforms/datasets"
)

// writeShards writes passes of pairs as a shard dataset (views: 2 for training, 1 for
// evaluation shards) and commits it.
func writeShards(t testing.TB, dir string, views int, passes ...[]Pair) {
	t.Helper()
	ctx := context.Background()
	ref := passes[0][0].View1
	cfg := shards.Config{
		Dataset: datasets.IDX, Split: "train", Preset: "test", Augment: json.RawMessage(`{}`), Seed: 1,
		Passes: len(passes), Parts: 2, Views: views, Encoding: shards.Raw,
		Height: ref.H, Width: ref.W, Channels: ref.C, CodeVersion: "test", SourceChecksum: "sha256:00",
	}
	if views == 1 {
		cfg.Preset = "none"
	}
	if err := shards.Prepare(ctx, dir, cfg, false); err != nil {
		t.Fatal(err)
	}
	var infos []shards.ShardInfo
	for pass, pairs := range passes {
		for part := range cfg.Parts {
			w, err := shards.NewWriter(ctx, dir, shards.ShardID{Pass: pass, Part: part, Parts: cfg.Parts}, cfg, shards.WriterOptions{RowGroupBytes: 2048})
			if err != nil {
				t.Fatal(err)
			}
			for i := part; i < len(pairs); i += cfg.Parts {
				if err := w.WriteViews(fmt.Sprintf("synthetic/%05d", i), int64(i), pairs[i].Label, pairs[i].View1, pairs[i].View2); err != nil {
					t.Fatal(err)
				}
			}
			info, err := w.Close()
			if err != nil {
				t.Fatal(err)
			}
			infos = append(infos, info)
		}
	}
	if _, err := shards.Commit(ctx, dir, cfg, infos, int64(len(passes[0])), shards.DeadLetters{}); err != nil {
		t.Fatal(err)
	}
}

func TestShardSourceTrainsAndResumesExactly(t *testing.T) {
	dir := t.TempDir()
	writeShards(t, dir, 2, syntheticPairs(8, 26, 3, 6, 6, 1), syntheticPairs(9, 26, 3, 6, 6, 1))
	src, err := OpenShards(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	info := src.Info()
	if info.Examples != 26 || info.Passes != 2 || info.Height != 6 || info.Channels != 1 || info.Dataset != datasets.IDX {
		t.Fatalf("info = %+v", info)
	}
	// Every example appears once per epoch.
	it, err := src.Batches(context.Background(), 1, 5, 4, 0)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for {
		b, err := it.Next()
		if err != nil {
			break
		}
		if err := b.Validate(); err != nil {
			t.Fatal(err)
		}
		seen += b.N
	}
	it.Close()
	if seen != 24 {
		t.Errorf("an epoch at batch 4 gave %d pairs, want 24 (26 less the partial batch)", seen)
	}

	ctx := context.Background()
	whole := t.TempDir()
	run := testRunConfig(t, whole)
	run.Data = dir
	sum, err := Train(ctx, testStepConfig(MLP), run, quietOptions(t, src))
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	run.Out, run.MaxSteps = out, 8
	if _, err := Train(ctx, testStepConfig(MLP), run, quietOptions(t, src)); err != nil {
		t.Fatal(err)
	}
	run.MaxSteps = 0
	opts := quietOptions(t, src)
	opts.Resume = out
	resumed, err := Train(ctx, testStepConfig(MLP), run, opts)
	if err != nil {
		t.Fatal(err)
	}
	sameBytes(t, variableBytes(t, sum.Checkpoint), variableBytes(t, resumed.Checkpoint))
}

func TestOpenShardsRejects(t *testing.T) {
	single := t.TempDir()
	writeShards(t, single, 1, syntheticPairs(8, 6, 3, 6, 6, 1))
	for _, tc := range []struct {
		name, dir, want string
	}{
		{"single views", single, "holds single views"},
		{"no manifest", t.TempDir(), "not a complete dataset"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := OpenShards(context.Background(), tc.dir)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want %q", err, tc.want)
			}
		})
	}
	imgs, err := ReadLabeledImages(context.Background(), single)
	if err != nil {
		t.Fatal(err)
	}
	if imgs.N != 6 || len(imgs.Images) != 6*36 || len(imgs.Labels) != 6 {
		t.Errorf("read %d images (%d bytes, %d labels), want 6", imgs.N, len(imgs.Images), len(imgs.Labels))
	}
}

// A resumed run on other data is refused.
func TestResumeRefusesOtherData(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	writeShards(t, a, 2, syntheticPairs(8, 8, 2, 6, 6, 1))
	writeShards(t, b, 2, syntheticPairs(9, 8, 2, 6, 6, 1))
	srcA, err := OpenShards(context.Background(), a)
	if err != nil {
		t.Fatal(err)
	}
	srcB, err := OpenShards(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	run := testRunConfig(t, out)
	run.MaxSteps = 1
	if _, err := Train(context.Background(), testStepConfig(MLP), run, quietOptions(t, srcA)); err != nil {
		t.Fatal(err)
	}
	opts := quietOptions(t, srcB)
	opts.Resume = out
	_, err = Train(context.Background(), testStepConfig(MLP), run, opts)
	if err == nil || !strings.Contains(err.Error(), "was trained on other data") {
		t.Errorf("error = %v, want a refusal naming other data", err)
	}
}
