package trainstep

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/dcl-beam/dcl-beam/analysis"
	"github.com/dcl-beam/dcl-beam/internal/testing/fashionmnist"
	"github.com/dcl-beam/dcl-beam/transforms"
	"github.com/dcl-beam/dcl-beam/transforms/augment"
)

// fashionMNIST reads the first n images and labels of a Fashion-MNIST split, or skips the
// test if the data is absent.
func fashionMNIST(t *testing.T, split string, n int) ([]transforms.Image, []int32) {
	t.Helper()
	data := fashionmnist.Load(t, split, n)
	images := make([]transforms.Image, data.N)
	labels := make([]int32, data.N)
	for i := range images {
		images[i] = transforms.Image{Pix: data.Image(i), H: fashionmnist.Side, W: fashionmnist.Side, C: 1}
		labels[i] = int32(data.Labels[i])
	}
	return images, labels
}

// TestMethodsOnFashionMNIST trains the small CNN on real images and SimCLR views for a few
// epochs with each training method and the DCL loss: the loss must fall and the backbone's
// kNN accuracy on held-out test images must beat the untrained encoder's (and, for SimCLR,
// be far above chance: 10 classes).
func TestMethodsOnFashionMNIST(t *testing.T) {
	const n, passes = 384, 2
	images, labels := fashionMNIST(t, "train", n)
	testImages, testLabels := fashionMNIST(t, "test", 200)
	src := fashionPairs(t, images, labels, passes)
	for _, tc := range []struct {
		method  string
		mc      MethodConfig
		epochs  int
		lr      float64
		minTop1 float64
	}{
		{SimCLRMethod, MethodConfig{}, 4, 0.5, 50},
		// A queue of two batches (a third of an epoch) and four batch-norm groups of 16.
		{MoCoMethod, MethodConfig{SettingQueueSize: 128, SettingMomentumEMA: 0.9, SettingBNSplits: 4}, 20, 1, 0},
		// NNCLR learns from its neighbours only once the encoder finds good ones: at a
		// higher learning rate or fewer epochs its kNN accuracy here falls first.
		{NNCLRMethod, MethodConfig{SettingQueueSize: 384, SettingPredictorHidden: 64}, 30, 0.1, 0},
	} {
		t.Run(tc.method, func(t *testing.T) {
			if testing.Short() && tc.method != SimCLRMethod {
				t.Skip("-short: the queue methods train for 20 to 30 epochs")
			}
			cfg := testStepConfig(SmallCNN)
			cfg.Model.BaseWidth = 8
			cfg.Loss = LossConfig{Kind: DCL, Temperature: 0.1}
			cfg.Method, cfg.MethodConfig = tc.method, tc.mc
			out := t.TempDir()
			run := RunConfig{Data: "fashion-mnist", Out: out, BatchSize: 64, Epochs: tc.epochs, BaseLR: tc.lr, Seed: 3}
			if _, err := Train(context.Background(), cfg, run, quietOptions(t, src)); err != nil {
				t.Fatal(err)
			}
			// A queue starts as random unit vectors, easy negatives: the loss rises while the
			// first epoch fills it with real keys, so the queue methods are compared from
			// their second epoch.
			from := 0
			if tc.method != SimCLRMethod {
				from = 1
			}
			first, last := epochLoss(t, out, from), epochLoss(t, out, tc.epochs-1)
			if !(last < first-0.1) {
				t.Errorf("mean DCL loss %.3f in epoch %d, %.3f in epoch %d: not learning", first, from+1, last, tc.epochs)
			}

			// The untrained encoder: the same model and initial weights, saved before any step.
			untrained := filepath.Join(t.TempDir(), "untrained.dclckpt")
			s, err := NewStep(newTestBackend(t), cfg, fashionmnist.Side, fashionmnist.Side)
			if err != nil {
				t.Fatal(err)
			}
			if err := SaveCheckpoint(context.Background(), untrained, s, nil, TrainState{}); err != nil {
				t.Fatal(err)
			}
			s.Finalize()
			before := fashionKNN(t, untrained, images, labels, testImages, testLabels)
			after := fashionKNN(t, out, images, labels, testImages, testLabels)
			t.Logf("%s: loss %.3f → %.3f; kNN top-1 %.1f%% untrained, %.1f%% trained", tc.method, first, last, before, after)
			if after <= before || after < tc.minTop1 {
				t.Errorf("kNN top-1 %.1f%% after training, %.1f%% untrained: want higher (and ≥ %.0f%%)", after, before, tc.minTop1)
			}
		})
	}
}

// fashionPairs is a memory source of SimCLR-CIFAR view pairs of images, passes passes.
func fashionPairs(t *testing.T, images []transforms.Image, labels []int32, passes int) *MemorySource {
	t.Helper()
	preset, err := augment.Preset(augment.SimCLRCIFAR, 28)
	if err != nil {
		t.Fatal(err)
	}
	aug, err := augment.New(preset)
	if err != nil {
		t.Fatal(err)
	}
	var all [][]Pair
	for pass := range passes {
		pairs := make([]Pair, len(images))
		for i, img := range images {
			key := fmt.Sprintf("fashion-mnist/train/%05d", i)
			v1, err := aug.View(img, 1, key, pass, 0)
			if err != nil {
				t.Fatal(err)
			}
			v2, err := aug.View(img, 1, key, pass, 1)
			if err != nil {
				t.Fatal(err)
			}
			pairs[i] = Pair{View1: v1, View2: v2, Label: labels[i]}
		}
		all = append(all, pairs)
	}
	src, err := NewMemorySource("fashion-mnist", all...)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// epochLoss is the mean loss of one epoch of a run, from its log.
func epochLoss(t *testing.T, out string, epoch int) float64 {
	t.Helper()
	f, err := os.Open(filepath.Join(out, LogName))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var sum float64
	var count int
	dec := json.NewDecoder(f)
	for dec.More() {
		var l LogLine
		if err := dec.Decode(&l); err != nil {
			t.Fatal(err)
		}
		if l.Epoch == epoch {
			sum += l.Loss
			count++
		}
	}
	if count == 0 {
		t.Fatalf("no steps of epoch %d in %s", epoch, out)
	}
	return sum / float64(count)
}

// fashionKNN is the kNN top-1 (k = 50) of test images against training images, on the
// backbone features of the encoder at path.
func fashionKNN(t *testing.T, path string, images []transforms.Image, labels []int32, testImages []transforms.Image, testLabels []int32) float64 {
	t.Helper()
	enc, err := LoadEncoder(context.Background(), newTestBackend(t), path)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	vectors := func(imgs []transforms.Image, labels []int32, name string) analysis.LabeledVectors {
		rows, err := enc.Embed(imgs, Backbone)
		if err != nil {
			t.Fatal(err)
		}
		v, err := analysis.VectorsFromRows(rows, name)
		if err != nil {
			t.Fatal(err)
		}
		return analysis.LabeledVectors{Source: name, Vectors: v, Labels: labels}
	}
	knn := analysis.DefaultKNNConfig()
	knn.K, knn.NumClasses = 50, 10
	res, err := analysis.KNN(vectors(images, labels, "train"), vectors(testImages, testLabels, "test"), knn)
	if err != nil {
		t.Fatal(err)
	}
	return res.Top1
}
