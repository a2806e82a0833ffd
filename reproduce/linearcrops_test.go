package reproduce

import (
	"context"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/shards"
	"github.com/dcl-beam/dcl-beam/shards/embeddings"
	"github.com/dcl-beam/dcl-beam/transforms/augment"
)

// A config whose linear probe trains on augmented crops (OpenSelfSup's protocol) makes
// crop_passes passes of RandomResizedCrop and flip of the train split, embeds every pass
// with each encoder, and the probe of every run and baseline trains on them; the kNN bank
// stays the centre crops.
func TestLinearProbeOnAugmentedCrops(t *testing.T) {
	input, out := t.TempDir(), t.TempDir()
	writeBarsIDX(t, input)
	ctx := context.Background()
	cfg := parseTiny(t, input, func(s string) string {
		s = strings.Replace(s, "    - {name: dcl, loss: dcl}\n", "", 1)
		s = strings.Replace(s, "epochs: 2,", "epochs: 1,", 1)
		s = strings.Replace(s, "  npc: {batch_sizes: [8, 16], samples: 2}\n", "", 1)
		s = strings.Replace(s, "  knn_every: 1\n", "", 1)
		return strings.Replace(s, "linear: {epochs: 5, lr: 1, batch_size: 32}", "linear: {epochs: 4, lr: 1, batch_size: 32, crops: augmented, crop_passes: 3}", 1)
	})
	res, err := Run(ctx, cfg, Options{Out: out})
	if err != nil {
		t.Fatal(err)
	}
	m, err := shards.ReadManifest(ctx, storage.Join(out, "data", "eval-train-crops"))
	if err != nil {
		t.Fatal(err)
	}
	// Each stored pass is a pair of crops of every image: 3 passes of the probe's take 2.
	if m.Config.Preset != augment.CropFlip || m.Config.Passes != 2 || m.Config.Views != 2 {
		t.Errorf("the crops' dataset: preset %s, %d passes of %d views; want %s and 2 of 2", m.Config.Preset, m.Config.Passes, m.Config.Views, augment.CropFlip)
	}
	r, err := embeddings.Open(ctx, storage.Join(out, "runs", "infonce", "embeddings", "train-crops"), 0)
	if err != nil {
		t.Fatal(err)
	}
	rows, views := r.Rows(), r.Meta()[embeddings.MetaViews]
	r.Close()
	if rows != 2*128 || views != "2" {
		t.Errorf("the crops' embeddings hold %d rows of %q views, want 2 passes of 128 view pairs", rows, views)
	}
	for _, got := range []struct {
		name string
		ev   Evaluation
	}{{"infonce", res.Runs[0].Evaluation}, {res.Baselines[0].Name, res.Baselines[0].Evaluation}, {res.Baselines[1].Name, res.Baselines[1].Evaluation}} {
		if got.ev.Linear == nil || got.ev.Linear.CropPasses != 3 || got.ev.Linear.NTrain != 128 {
			t.Errorf("%s: linear probe %+v, want one trained on 3 passes of 128 crops", got.name, got.ev.Linear)
		}
		if got.ev.KNN == nil || got.ev.KNN.NTrain != 128 {
			t.Errorf("%s: kNN %+v, want a bank of the 128 centre crops", got.name, got.ev.KNN)
		}
	}
}

// With evaluate.knn_monitor.linear the trainer's monitor fits a linear probe too: each run's
// curves carry its top-1 at every monitor epoch, and the report draws them.
func TestMonitorLinearProbeCurve(t *testing.T) {
	input, out := t.TempDir(), t.TempDir()
	writeBarsIDX(t, input)
	ctx := context.Background()
	cfg := parseTiny(t, input, func(s string) string {
		s = strings.Replace(s, "    - {name: dcl, loss: dcl}\n", "", 1)
		s = strings.Replace(s, "  npc: {batch_sizes: [8, 16], samples: 2}\n", "", 1)
		s = strings.Replace(s, "  linear: {epochs: 5, lr: 1, batch_size: 32}\n", "", 1)
		s = strings.Replace(s, "  baselines: [raw-pixels, random-init]\n", "", 1)
		return strings.Replace(s, "  knn_every: 1\n", "  knn_every: 1\n  knn_monitor: {linear: true}\n", 1)
	})
	res, err := Run(ctx, cfg, Options{Out: out})
	if err != nil {
		t.Fatal(err)
	}
	c := res.Runs[0].Curves
	if len(c.KNNEpoch) != 2 || len(c.LinearTop1) != 2 {
		t.Fatalf("curves %+v: want the monitor's kNN and linear top-1 after each of 2 epochs", c)
	}
	for _, v := range c.LinearTop1 {
		if v < 50 || v > 100 {
			t.Errorf("the monitor's linear top-1 %v on two classes of bars: want at least chance", c.LinearTop1)
		}
	}
	if ok, err := storage.Exists(ctx, storage.Join(out, PlotsDir, LinearPlotName)); err != nil || !ok {
		t.Errorf("no %s in the report's plots (%v)", LinearPlotName, err)
	}
}
