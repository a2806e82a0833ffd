package trainstep

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/shards"
	"github.com/dcl-beam/dcl-beam/transforms/augment"
	"github.com/dcl-beam/dcl-beam/transforms/datasets"
)

// writeShards writes passes of pairs as a shard dataset (views: 2 for training, 1 for
// evaluation shards) and commits it.
func writeShards(t testing.TB, dir string, views int, passes ...[]Pair) {
	t.Helper()
	ref := passes[0][0].View1
	cfg := shards.Config{
		Dataset: datasets.IDX, Split: "train", Preset: "test", Augment: json.RawMessage(`{}`), Seed: 1,
		Passes: len(passes), Parts: 2, Views: views, Encoding: shards.Raw,
		Height: ref.H, Width: ref.W, Channels: ref.C, CodeVersion: "test", SourceChecksum: "sha256:00",
	}
	if views == 1 {
		cfg.Preset = "none"
	}
	writeDataset(t, dir, cfg, shards.WriterOptions{RowGroupBytes: 2048}, len(passes[0]), func(w *shards.Writer, pass, i int) error {
		p := passes[pass][i]
		return w.WriteViews(fmt.Sprintf("synthetic/%05d", i), int64(i), p.Label, p.View1, p.View2)
	})
}

// writeDataset prepares dir for cfg, writes rows 0 to n-1 of every pass (write writes one,
// each into part i mod Parts) and commits the dataset.
func writeDataset(t testing.TB, dir string, cfg shards.Config, opts shards.WriterOptions, n int, write func(w *shards.Writer, pass, i int) error) {
	t.Helper()
	ctx := context.Background()
	if err := shards.Prepare(ctx, dir, cfg, false); err != nil {
		t.Fatal(err)
	}
	var infos []shards.ShardInfo
	for pass := range cfg.Passes {
		for part := range cfg.Parts {
			w, err := shards.NewWriter(ctx, dir, shards.ShardID{Pass: pass, Part: part, Parts: cfg.Parts}, cfg, opts)
			if err != nil {
				t.Fatal(err)
			}
			for i := part; i < n; i += cfg.Parts {
				if err := write(w, pass, i); err != nil {
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
	if _, err := shards.Commit(ctx, dir, cfg, infos, int64(n), shards.DeadLetters{}); err != nil {
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

// writeBaseShards writes base shards (Config.Online) of the view-1 images of pairs: one
// image per row, from which the reader makes simclr-cifar views of size×size.
func writeBaseShards(t testing.TB, dir string, size int, pairs []Pair) {
	t.Helper()
	aug, err := augment.Preset(augment.SimCLRCIFAR, size)
	if err != nil {
		t.Fatal(err)
	}
	augJSON, err := json.Marshal(aug)
	if err != nil {
		t.Fatal(err)
	}
	cfg := shards.Config{
		Dataset: datasets.IDX, Split: "train", Preset: aug.Preset, Augment: augJSON, Seed: 1,
		Passes: 1, Parts: 2, Views: 2, Encoding: shards.Raw, Online: true, GroupRows: 5,
		Height: size, Width: size, Channels: pairs[0].View1.C, CodeVersion: "test", SourceChecksum: "sha256:00",
	}
	writeDataset(t, dir, cfg, shards.WriterOptions{}, len(pairs), func(w *shards.Writer, _, i int) error {
		img := pairs[i].View1
		return w.Write(shards.Row{Key: fmt.Sprintf("synthetic/%05d", i), Index: int64(i), Label: pairs[i].Label,
			View1: img.Pix, Height: int32(img.H), Width: int32(img.W), Channels: int32(img.C), Encoding: string(shards.Raw)})
	})
}

// TestBaseShardsTrainFreshViewsAndResumeExactly: on base shards every epoch has views of its
// own, and an interrupted run resumed from its checkpoint (part-way through an epoch) ends
// with the weights of one that never stopped, bit for bit.
func TestBaseShardsTrainFreshViewsAndResumeExactly(t *testing.T) {
	dir := t.TempDir()
	writeBaseShards(t, dir, 6, syntheticPairs(8, 26, 3, 9, 8, 1))
	ctx := context.Background()
	src, err := OpenShards(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if info := src.Info(); info.Examples != 26 || info.Passes != OnlinePasses || info.Height != 6 || info.Width != 6 || info.Channels != 1 {
		t.Fatalf("info = %+v", info)
	}
	epochViews := func(epoch int) map[int32][]byte { // view 1 bytes by label and order: the epoch's first batch
		it, err := src.Batches(ctx, epoch, 5, 26, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer it.Close()
		b, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		return map[int32][]byte{0: append([]byte{}, b.View1...), 1: append([]byte{}, b.View2...)}
	}
	e0, e0again, e1 := epochViews(0), epochViews(0), epochViews(1)
	if string(e0[0]) != string(e0again[0]) || string(e0[1]) != string(e0again[1]) {
		t.Error("epoch 0 read twice gave other views")
	}
	if string(e0[0]) == string(e1[0]) || string(e0[0]) == string(e0[1]) {
		t.Error("epoch 1 repeats epoch 0's views, or a pair's two views are the same")
	}

	run := testRunConfig(t, t.TempDir())
	run.Data, run.Epochs = dir, 3
	sum, err := Train(ctx, testStepConfig(MLP), run, quietOptions(t, src))
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	run.Out, run.MaxSteps = out, 7
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
