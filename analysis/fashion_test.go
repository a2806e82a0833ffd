package analysis

import (
	"slices"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/testing/fashionmnist"
)

// fashion reads Fashion-MNIST as raw pixel vectors in [0, 1], or skips the test without it.
func fashion(tb testing.TB) (train, test LabeledVectors) {
	tb.Helper()
	return fashionSplit(tb, "train"), fashionSplit(tb, "test")
}

func fashionSplit(tb testing.TB, split string) LabeledVectors {
	data := fashionmnist.Load(tb, split, 0)
	dim := fashionmnist.Side * fashionmnist.Side
	l := LabeledVectors{Source: "fashion-mnist " + split, Vectors: Vectors{Dim: dim, Data: make([]float32, len(data.Pixels))}, Labels: make([]int32, data.N)}
	for i, p := range data.Pixels {
		l.Vectors.Data[i] = float32(p) / 255
	}
	for i, y := range data.Labels {
		l.Labels[i] = int32(y)
	}
	return l
}

// subset returns the first n examples.
func subset(l LabeledVectors, n int) LabeledVectors {
	return LabeledVectors{Source: l.Source, Vectors: l.Vectors.Slice(0, n), Labels: l.Labels[:n]}
}

// TestFashionMNISTRawPixelKNN runs kNN on raw pixels of a Fashion-MNIST subset: exactly the
// reference implementation's answers on a small part, and a sensible accuracy on a larger
// one. The full 10,000 × 60,000 figure is BenchmarkFashionMNISTRawPixelKNN's.
func TestFashionMNISTRawPixelKNN(t *testing.T) {
	train, test := fashion(t)
	if train.Vectors.Len() != 60000 || test.Vectors.Len() != 10000 || train.Vectors.Dim != 784 {
		t.Fatalf("Fashion-MNIST has %d train and %d test vectors of %d values", train.Vectors.Len(), test.Vectors.Len(), train.Vectors.Dim)
	}
	small, smallTest := subset(train, 2000), subset(test, 50)
	for _, metric := range []Metric{Cosine, Euclidean} {
		want := refKNN(small, smallTest, 20, 0.1, metric, 10)
		got := knnPredictions(t, small, smallTest, 20, 0.1, metric, 10, 700)
		for i := range want {
			if !slices.Equal(got[i], want[i]) {
				t.Errorf("%v: test image %d ranks %v, reference %v", metric, i, got[i], want[i])
			}
		}
	}
	res, err := KNN(subset(train, 10000), subset(test, 1000), KNNConfig{NumClasses: 10})
	if err != nil {
		t.Fatal(err)
	}
	// The protocol's kNN on raw pixels scores in the 70s (78.85% on the full sets); chance is
	// 10%, so far below means a bug.
	if res.Top1 < 68 || res.Top1 > 90 || res.Top5 < 97 {
		t.Errorf("raw-pixel kNN on 10,000 × 1,000: top-1 %.2f%%, top-5 %.2f%%", res.Top1, res.Top5)
	}
	t.Logf("raw-pixel cosine kNN (k=200, T=0.1), 10,000 train × 1,000 test: top-1 %.2f%%, top-5 %.2f%%", res.Top1, res.Top5)
}
