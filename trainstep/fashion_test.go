package trainstep

import (
	"compress/gzip"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/dcl-beam/dcl-beam/analysis"
	"github.com/dcl-beam/dcl-beam/transforms"
	"github.com/dcl-beam/dcl-beam/transforms/augment"
)

// fashionMNIST reads the first n images and labels of a Fashion-MNIST split (IDX files, as
// Debian's dataset-fashion-mnist installs them), or skips the test if the data is absent.
func fashionMNIST(t *testing.T, split string, n int) ([]transforms.Image, []int32) {
	t.Helper()
	dir := os.Getenv("DCL_FASHION_MNIST")
	if dir == "" {
		dir = "/usr/share/datasets/fashion-mnist"
	}
	open := func(name string) io.Reader {
		f, err := os.Open(filepath.Join(dir, name))
		if os.IsNotExist(err) {
			t.Skipf("Fashion-MNIST not found in %s (install Debian's dataset-fashion-mnist or set DCL_FASHION_MNIST)", dir)
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		z, err := gzip.NewReader(f)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return z
	}
	imgs := open(split + "-images-idx3-ubyte.gz")
	var head [4]uint32
	if err := binary.Read(imgs, binary.BigEndian, &head); err != nil || head[0] != 0x803 || head[2] != 28 || head[3] != 28 {
		t.Fatalf("%s images: header %x, %v", split, head, err)
	}
	labels := open(split + "-labels-idx1-ubyte.gz")
	var lhead [2]uint32
	if err := binary.Read(labels, binary.BigEndian, &lhead); err != nil || lhead[0] != 0x801 {
		t.Fatalf("%s labels: header %x, %v", split, lhead, err)
	}
	out := make([]transforms.Image, n)
	lab := make([]byte, n)
	for i := range out {
		out[i] = transforms.NewImage(28, 28, 1)
		if _, err := io.ReadFull(imgs, out[i].Pix); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := io.ReadFull(labels, lab); err != nil {
		t.Fatal(err)
	}
	ls := make([]int32, n)
	for i, l := range lab {
		ls[i] = int32(l)
	}
	return out, ls
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
	testImages, testLabels := fashionMNIST(t, "t10k", 200)
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
