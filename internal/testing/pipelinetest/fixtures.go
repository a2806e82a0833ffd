// Package pipelinetest writes small datasets in their published on-disk formats for the
// tests and benchmarks of the pipelines and of the commands that run them: CIFAR-10 binary
// batches, STL-10 binary files, MNIST-style IDX files and image folders of JPEG and PNG
// files (internal/testing/testfiles makes the images and archives). Pixels are pseudo-random
// functions of the record's number, so a test can recompute any source image (CIFAR10Image,
// STL10Image) and compare it with what a pipeline wrote.
package pipelinetest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/testing/testfiles"

	"github.com/dcl-beam/dcl-beam/transforms"
)

// CIFAR10Label is the label of record i of a CIFAR10 fixture (counted across its files).
func CIFAR10Label(i int) int { return (i * 7) % 10 }

// CIFAR10Image is the image of record i of a CIFAR10 fixture, HWC.
func CIFAR10Image(i int) transforms.Image {
	m := transforms.NewImage(32, 32, 3)
	r := rand.New(rand.NewPCG(uint64(i), 0x5eed))
	// Smooth patterns with noise: closer to photographs than noise alone, so JPEG sizes
	// and augmentations behave as on real data.
	a, b, c := r.IntN(8)+1, r.IntN(8)+1, r.IntN(256)
	for y := range 32 {
		for x := range 32 {
			for ch := range 3 {
				m.Pix[(y*32+x)*3+ch] = uint8(x*a + y*b + ch*c + r.IntN(16))
			}
		}
	}
	return m
}

// CIFAR10Record is record i of a CIFAR10 fixture in the binary format: the label byte,
// then the R, G and B planes.
func CIFAR10Record(i int) []byte {
	m := CIFAR10Image(i)
	rec := make([]byte, 1+3072)
	rec[0] = byte(CIFAR10Label(i))
	for p := range 1024 {
		for ch := range 3 {
			rec[1+ch*1024+p] = m.Pix[p*3+ch]
		}
	}
	return rec
}

// WriteCIFAR10 writes the six files of a CIFAR-10 binary folder: data_batch_1..5.bin with
// perFile records each (train records 0 … 5·perFile-1) and test_batch.bin with perFile
// records numbered from 5·perFile.
func WriteCIFAR10(t testing.TB, dir string, perFile int) {
	t.Helper()
	for f := range 6 {
		name := fmt.Sprintf("data_batch_%d.bin", f+1)
		if f == 5 {
			name = "test_batch.bin"
		}
		var b bytes.Buffer
		for i := range perFile {
			b.Write(CIFAR10Record(f*perFile + i))
		}
		testfiles.WriteFile(t, filepath.Join(dir, name), b.Bytes())
	}
}

// STL10Image is image i of an STL-10 fixture's part (train, test or unlabeled), HWC.
func STL10Image(part string, i int) transforms.Image {
	m := transforms.NewImage(96, 96, 3)
	r := rand.New(rand.NewPCG(uint64(i), uint64(len(part))))
	a, b := r.IntN(4)+1, r.IntN(4)+1
	for y := range 96 {
		for x := range 96 {
			for ch := range 3 {
				m.Pix[(y*96+x)*3+ch] = uint8(x*a + y*b + ch*70 + r.IntN(12))
			}
		}
	}
	return m
}

// STL10Label is the label (0..9) of image i of an STL-10 fixture's labelled part.
func STL10Label(i int) int { return (i * 3) % 10 }

// WriteSTL10 writes an stl10_binary folder: train_X.bin and train_y.bin with train images,
// test_X.bin and test_y.bin with test images, unlabeled_X.bin with unlabeled images. As
// published, each image is 3 planes stored column by column and labels count from 1.
func WriteSTL10(t testing.TB, dir string, train, test, unlabeled int) {
	t.Helper()
	for _, p := range []struct {
		name string
		n    int
	}{{"train", train}, {"test", test}, {"unlabeled", unlabeled}} {
		var x bytes.Buffer
		y := make([]byte, p.n)
		for i := range p.n {
			m := STL10Image(p.name, i)
			for ch := range 3 {
				for col := range 96 {
					for row := range 96 {
						x.WriteByte(m.Pix[(row*96+col)*3+ch])
					}
				}
			}
			y[i] = byte(STL10Label(i) + 1)
		}
		testfiles.WriteFile(t, filepath.Join(dir, p.name+"_X.bin"), x.Bytes())
		if p.name != "unlabeled" {
			testfiles.WriteFile(t, filepath.Join(dir, p.name+"_y.bin"), y)
		}
	}
}

// IDXLabel is the label of image i of an IDX fixture.
func IDXLabel(i int) byte { return byte((i * 3) % 10) }

// WriteIDX writes train or t10k (split "test") images and labels of n 28×28 images, gzipped
// when zipped, as MNIST publishes them.
func WriteIDX(t testing.TB, dir, split string, n int, zipped bool) {
	t.Helper()
	prefix := "train"
	if split == "test" {
		prefix = "t10k"
	}
	images := binary.BigEndian.AppendUint32([]byte{0, 0, 8, 3}, uint32(n))
	images = binary.BigEndian.AppendUint32(images, 28)
	images = binary.BigEndian.AppendUint32(images, 28)
	labels := binary.BigEndian.AppendUint32([]byte{0, 0, 8, 1}, uint32(n))
	for i := range n {
		r := rand.New(rand.NewPCG(uint64(i), 0x1d8))
		for p := range 28 * 28 {
			images = append(images, byte(p%28*9+r.IntN(8)))
		}
		labels = append(labels, IDXLabel(i))
	}
	suffix := ""
	if zipped {
		images, labels, suffix = testfiles.Gzip(t, images), testfiles.Gzip(t, labels), ".gz"
	}
	testfiles.WriteFile(t, filepath.Join(dir, prefix+"-images-idx3-ubyte"+suffix), images)
	testfiles.WriteFile(t, filepath.Join(dir, prefix+"-labels-idx1-ubyte"+suffix), labels)
}

// WriteFolder writes an image folder: one subfolder per class, perClass images each,
// alternating JPEG and PNG, w×h pixels. It returns the files' paths by class.
func WriteFolder(t testing.TB, dir string, classes []string, perClass, w, h int) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for c, class := range classes {
		for i := range perClass {
			seed := c*1000 + i
			name, data := fmt.Sprintf("img%04d.jpg", i), testfiles.JPEG(t, w, h, seed)
			if i%2 == 1 {
				name, data = fmt.Sprintf("img%04d.png", i), testfiles.PNG(t, w, h, seed)
			}
			p := filepath.Join(dir, class, name)
			testfiles.WriteFile(t, p, data)
			out[class] = append(out[class], p)
		}
	}
	return out
}
