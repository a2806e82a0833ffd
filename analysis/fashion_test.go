package analysis

import (
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
)

// fashionDir is where the tests read Fashion-MNIST (Debian's dataset-fashion-mnist).
func fashionDir() string {
	if d := os.Getenv("DCL_FASHION_MNIST"); d != "" {
		return d
	}
	return "/usr/share/datasets/fashion-mnist"
}

// readIDX reads a gzipped IDX file of unsigned bytes: its dimensions and data.
func readIDX(path string) ([]int, []byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	var magic [4]byte
	if _, err := io.ReadFull(gz, magic[:]); err != nil {
		return nil, nil, fmt.Errorf("%s: header: %w", path, err)
	}
	if magic[0] != 0 || magic[1] != 0 || magic[2] != 0x08 || magic[3] == 0 {
		return nil, nil, fmt.Errorf("%s: magic % x is not an IDX file of unsigned bytes", path, magic)
	}
	dims := make([]int, magic[3])
	size := 1
	for i := range dims {
		var d uint32
		if err := binary.Read(gz, binary.BigEndian, &d); err != nil {
			return nil, nil, fmt.Errorf("%s: dimension %d: %w", path, i, err)
		}
		dims[i] = int(d)
		size *= int(d)
	}
	data := make([]byte, size)
	if _, err := io.ReadFull(gz, data); err != nil {
		return nil, nil, fmt.Errorf("%s: %d bytes of data: %w", path, size, err)
	}
	return dims, data, nil
}

// fashionSplit reads one split ("train" or "t10k") as raw pixel vectors in [0, 1].
func fashionSplit(split string) (LabeledVectors, error) {
	dir := fashionDir()
	imgPath := filepath.Join(dir, split+"-images-idx3-ubyte.gz")
	dims, pix, err := readIDX(imgPath)
	if err != nil {
		return LabeledVectors{}, err
	}
	ldims, labels, err := readIDX(filepath.Join(dir, split+"-labels-idx1-ubyte.gz"))
	if err != nil {
		return LabeledVectors{}, err
	}
	if len(dims) != 3 || len(ldims) != 1 || ldims[0] != dims[0] {
		return LabeledVectors{}, fmt.Errorf("%s: dimensions %v with labels %v", imgPath, dims, ldims)
	}
	l := LabeledVectors{Source: imgPath, Vectors: Vectors{Dim: dims[1] * dims[2], Data: make([]float32, len(pix))}, Labels: make([]int32, len(labels))}
	for i, p := range pix {
		l.Vectors.Data[i] = float32(p) / 255
	}
	for i, y := range labels {
		l.Labels[i] = int32(y)
	}
	return l, nil
}

type fashionData struct {
	train, test LabeledVectors
	err         error
}

// loadFashion reads Fashion-MNIST once per test binary; it skips the test when the data is
// not installed.
var loadFashion = sync.OnceValue(func() fashionData {
	train, err := fashionSplit("train")
	if err != nil {
		return fashionData{err: err}
	}
	test, err := fashionSplit("t10k")
	return fashionData{train: train, test: test, err: err}
})

func fashion(tb testing.TB) (train, test LabeledVectors) {
	tb.Helper()
	d := loadFashion()
	if errors.Is(d.err, fs.ErrNotExist) {
		tb.Skipf("Fashion-MNIST not installed (%v): install Debian's dataset-fashion-mnist or set DCL_FASHION_MNIST", d.err)
	}
	if d.err != nil {
		tb.Fatal(d.err)
	}
	return d.train, d.test
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
