package trainstep

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/dcl-beam/dcl-beam/analysis"
	"github.com/dcl-beam/dcl-beam/internal/fashionmnist"
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

// TestSmallCNNOnFashionMNIST trains the small CNN with DCL on real images and SimCLR views
// for a few epochs: the loss must fall and the backbone's kNN accuracy on held-out test images
// must be far above chance (10 classes).
func TestSmallCNNOnFashionMNIST(t *testing.T) {
	const n, passes = 384, 2
	images, labels := fashionMNIST(t, "train", n)
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
		pairs := make([]Pair, n)
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
	cfg := testStepConfig(SmallCNN)
	cfg.Model.BaseWidth = 8
	cfg.Loss = LossConfig{Kind: DCL, Temperature: 0.1}
	out := t.TempDir()
	run := RunConfig{Data: "fashion-mnist", Out: out, BatchSize: 64, Epochs: 4, BaseLR: 0.5, Seed: 3}
	if _, err := Train(context.Background(), cfg, run, quietOptions(t, src)); err != nil {
		t.Fatal(err)
	}

	// Mean loss of the first and the last epoch, from the log.
	f, err := os.Open(filepath.Join(out, LogName))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	perEpoch := map[int][]float64{}
	dec := json.NewDecoder(f)
	for dec.More() {
		var l LogLine
		if err := dec.Decode(&l); err != nil {
			t.Fatal(err)
		}
		perEpoch[l.Epoch] = append(perEpoch[l.Epoch], l.Loss)
	}
	mean := func(xs []float64) float64 {
		var s float64
		for _, x := range xs {
			s += x
		}
		return s / float64(len(xs))
	}
	first, last := mean(perEpoch[0]), mean(perEpoch[3])
	if !(last < first-0.1) {
		t.Errorf("mean DCL loss %.3f in epoch 1, %.3f in epoch 4: not learning", first, last)
	}

	// kNN of 200 test images against the 384 training images, on backbone features.
	enc, err := LoadEncoder(context.Background(), newTestBackend(t), out)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	testImages, testLabels := fashionMNIST(t, "test", 200)
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
	t.Logf("loss %.3f → %.3f; kNN top-1 %.1f%%, top-5 %.1f%%", first, last, res.Top1, res.Top5)
	if res.Top1 < 50 {
		t.Errorf("kNN top-1 %.1f%% on Fashion-MNIST: want ≥ 50%% (chance is 10%%)", res.Top1)
	}
}
