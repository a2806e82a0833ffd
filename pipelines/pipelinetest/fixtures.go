// Package pipelinetest writes small datasets in their published on-disk formats for the
// tests and benchmarks of the pipelines and of the commands that run them: CIFAR-10 binary
// batches, STL-10 binary files, MNIST-style IDX files, image folders of JPEG and PNG files,
// and ImageNet class tars. Pixels are pseudo-random functions of the record's number, so a
// test can recompute any source image (CIFAR10Image, STL10Image) and compare it with what a
// pipeline wrote.
package pipelinetest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

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
		WriteFile(t, filepath.Join(dir, name), b.Bytes())
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
		WriteFile(t, filepath.Join(dir, p.name+"_X.bin"), x.Bytes())
		if p.name != "unlabeled" {
			WriteFile(t, filepath.Join(dir, p.name+"_y.bin"), y)
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
		images, labels, suffix = gz(t, images), gz(t, labels), ".gz"
	}
	WriteFile(t, filepath.Join(dir, prefix+"-images-idx3-ubyte"+suffix), images)
	WriteFile(t, filepath.Join(dir, prefix+"-labels-idx1-ubyte"+suffix), labels)
}

func gz(t testing.TB, data []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// Photo is a w×h RGB image that depends on seed: smooth gradients and noise.
func Photo(w, h, seed int) *image.RGBA {
	m := image.NewRGBA(image.Rect(0, 0, w, h))
	r := rand.New(rand.NewPCG(uint64(seed), 0x9407))
	a, b := r.IntN(5)+1, r.IntN(5)+1
	for y := range h {
		for x := range w {
			m.Set(x, y, color.RGBA{uint8(x*a + seed), uint8(y*b + seed*3), uint8((x+y)*a/2 + r.IntN(24)), 255})
		}
	}
	return m
}

// JPEG encodes Photo(w, h, seed) at quality 90.
func JPEG(t testing.TB, w, h, seed int) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := jpeg.Encode(&b, Photo(w, h, seed), &jpeg.Options{Quality: 90}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// PhotoJPEG is a JPEG with the detail of a photograph: at 500×375 it is about as large as
// an average ILSVRC-2012 training image (110 KB), so decoding it costs what decoding one
// of those does.
func PhotoJPEG(t testing.TB, w, h, seed int) []byte {
	t.Helper()
	m := Photo(w, h, seed)
	r := rand.New(rand.NewPCG(uint64(seed), 0x1a9e))
	for i := range m.Pix {
		if i%4 != 3 {
			m.Pix[i] = uint8(int(m.Pix[i]) + r.IntN(40) - 20)
		}
	}
	var b bytes.Buffer
	if err := jpeg.Encode(&b, m, &jpeg.Options{Quality: 90}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// PNG encodes Photo(w, h, seed).
func PNG(t testing.TB, w, h, seed int) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, Photo(w, h, seed)); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// CorruptJPEG is a JPEG whose headers are valid up to the scan, so a reader's header check
// accepts it, and whose scan is cut short: decoding it fails.
func CorruptJPEG(t testing.TB) []byte {
	t.Helper()
	good := JPEG(t, 24, 24, 1)
	sos := bytes.Index(good, []byte{0xFF, 0xDA})
	if sos < 0 {
		t.Fatal("no SOS marker in the encoded JPEG")
	}
	keep := sos + 2 + int(binary.BigEndian.Uint16(good[sos+2:])) + 4
	return append(good[:keep:keep], bytes.Repeat([]byte{0x55}, 20)...)
}

// WriteFolder writes an image folder: one subfolder per class, perClass images each,
// alternating JPEG and PNG, w×h pixels. It returns the files' paths by class.
func WriteFolder(t testing.TB, dir string, classes []string, perClass, w, h int) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for c, class := range classes {
		for i := range perClass {
			seed := c*1000 + i
			name, data := fmt.Sprintf("img%04d.jpg", i), JPEG(t, w, h, seed)
			if i%2 == 1 {
				name, data = fmt.Sprintf("img%04d.png", i), PNG(t, w, h, seed)
			}
			p := filepath.Join(dir, class, name)
			WriteFile(t, p, data)
			out[class] = append(out[class], p)
		}
	}
	return out
}

// TarMember is a file inside a test tar.
type TarMember struct {
	Name string
	Data []byte
}

// Tar returns a tar of the members, in order.
func Tar(t testing.TB, members []TarMember) []byte {
	t.Helper()
	var b bytes.Buffer
	w := tar.NewWriter(&b)
	for _, m := range members {
		if err := w.WriteHeader(&tar.Header{Name: m.Name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(m.Data))}); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(m.Data); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// WriteFile writes data to p, creating its folder.
func WriteFile(t testing.TB, p string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TreeChecksums returns the sha256 of every file under dir by relative path.
func TreeChecksums(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		sum := sha256.Sum256(data)
		out[filepath.ToSlash(rel)] = hex.EncodeToString(sum[:])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
