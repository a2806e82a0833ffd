// Package fashionmnist gives tests the real data set this project can test on: Fashion-MNIST
// as Debian's dataset-fashion-mnist installs it (gzipped IDX files in
// /usr/share/datasets/fashion-mnist, or the folder in $DCL_FASHION_MNIST). Tests that need it
// skip with a message saying how to install it; CI (.ci/run) makes sure it is there.
//
// Its IDX parsing is the minimum a test needs, independent of the project's reader
// (transforms/datasets), so tests can check that reader against it.
package fashionmnist

import (
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// DefaultDir is where Debian's package puts the files.
const DefaultDir = "/usr/share/datasets/fashion-mnist"

// Side is the images' width and height; they have one channel.
const Side = 28

// Dir returns the folder of the Fashion-MNIST files, or skips the test when they are absent.
func Dir(tb testing.TB) string {
	tb.Helper()
	dir := os.Getenv("DCL_FASHION_MNIST")
	if dir == "" {
		dir = DefaultDir
	}
	for _, name := range []string{"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			tb.Skipf("Fashion-MNIST not found in %s (install Debian's dataset-fashion-mnist or set DCL_FASHION_MNIST): %v", dir, err)
		}
	}
	return dir
}

// Split is the images and labels of a split: Pixels holds N images of Side×Side bytes, one
// after the other.
type Split struct {
	N      int
	Pixels []byte
	Labels []byte
}

// Image returns image i's Side×Side pixels.
func (s Split) Image(i int) []byte { return s.Pixels[i*Side*Side : (i+1)*Side*Side] }

// Load reads the first n images and labels of split "train" or "test" (all of them when n is
// 0), or skips the test when the files are absent.
func Load(tb testing.TB, split string, n int) Split {
	tb.Helper()
	dir := Dir(tb)
	prefix := map[string]string{"train": "train", "test": "t10k"}[split]
	if prefix == "" {
		tb.Fatalf("fashionmnist.Load: split %q: want train or test", split)
	}
	imgDims, pixels, err := readIDX(filepath.Join(dir, prefix+"-images-idx3-ubyte.gz"), 0x803, n, Side*Side)
	if err != nil {
		tb.Fatal(err)
	}
	lblDims, labels, err := readIDX(filepath.Join(dir, prefix+"-labels-idx1-ubyte.gz"), 0x801, n, 1)
	if err != nil {
		tb.Fatal(err)
	}
	if imgDims[0] != lblDims[0] || imgDims[1] != Side || imgDims[2] != Side {
		tb.Fatalf("Fashion-MNIST %s: images %v and labels %v do not match", split, imgDims, lblDims)
	}
	return Split{N: len(labels), Pixels: pixels, Labels: labels}
}

// readIDX reads a gzipped IDX file's dimensions and the data of its first n items (all when n
// is 0) of itemSize bytes each.
func readIDX(path string, magic uint32, n, itemSize int) ([]int, []byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	var m uint32
	if err := binary.Read(z, binary.BigEndian, &m); err != nil || m != magic {
		return nil, nil, fmt.Errorf("%s: magic %#x (%v), want %#x", path, m, err, magic)
	}
	dims := make([]uint32, magic&0xff)
	if err := binary.Read(z, binary.BigEndian, dims); err != nil {
		return nil, nil, fmt.Errorf("%s: header: %w", path, err)
	}
	out := make([]int, len(dims))
	for i, d := range dims {
		out[i] = int(d)
	}
	count := out[0]
	if n > 0 && n < count {
		count = n
	}
	data := make([]byte, count*itemSize)
	if _, err := io.ReadFull(z, data); err != nil {
		return nil, nil, fmt.Errorf("%s: data: %w", path, err)
	}
	return out, data, nil
}
