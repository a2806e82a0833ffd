package datasets

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/cputime"
	"github.com/dcl-beam/dcl-beam/internal/testing/testfiles"
)

// BenchmarkReadCIFAR reads a CIFAR-10 file of 10,000 records (500 under -short): the
// reader's throughput in records/s, from the page cache.
func BenchmarkReadCIFAR(b *testing.B) {
	n := 10000
	if testing.Short() {
		n = 500
	}
	dir := b.TempDir()
	testfiles.WriteFile(b, filepath.Join(dir, "test_batch.bin"), cifarBytes(0, repeatLabels(n, 10), nil))
	p := mustPlan(b, Spec{Dataset: CIFAR10, Input: dir, Split: "test"})
	b.SetBytes(int64(n) * cifar10Record)
	var records int64
	cpu := cputime.Process().Seconds()
	for b.Loop() {
		records += readAllRecords(b, p, false)
	}
	reportRates(b, records, cputime.Process().Seconds()-cpu)
}

// photoJPEG encodes a w×h image with smooth colour and noise, so that at quality 90 it is
// about as large as an ILSVRC-2012 photo of that size (~110 KB at 500×375).
func photoJPEG(b testing.TB, w, h int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 1))
	m := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			n := func(base int) uint8 { return uint8(max(0, min(255, base+rng.IntN(96)-48))) }
			m.SetRGBA(x, y, color.RGBA{n(x * 255 / w), n(y * 255 / h), n((x + y) * 128 / (w + h)), 255})
		}
	}
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, m, &jpeg.Options{Quality: 90}); err != nil {
		b.Fatal(err)
	}
	return buf.Bytes()
}

// BenchmarkReadJPEGFolder reads a class folder of 32 photo-sized JPEGs of 500×375 (4 of
// 64×48 under -short): "read" is listing, reading and header checks only (what Read does),
// "decode" adds Record.Image (what the augmenting step does next).
func BenchmarkReadJPEGFolder(b *testing.B) {
	n, w, h := 32, 500, 375
	if testing.Short() {
		n, w, h = 4, 64, 48
	}
	dir := b.TempDir()
	var size int64
	for i := range n {
		data := photoJPEG(b, w, h, uint64(i))
		size += int64(len(data))
		testfiles.WriteFile(b, filepath.Join(dir, fmt.Sprintf("c%d", i%2), fmt.Sprintf("%03d.JPEG", i)), data)
	}
	p := mustPlan(b, Spec{Dataset: Folder, Input: dir})
	for _, decode := range []bool{false, true} {
		name := "read"
		if decode {
			name = "decode"
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(size)
			var records int64
			cpu := cputime.Process().Seconds()
			for b.Loop() {
				records += readAllRecords(b, p, decode)
			}
			reportRates(b, records, cputime.Process().Seconds()-cpu)
			b.ReportMetric(float64(size)/float64(n)/1000, "kB/image")
		})
	}
}

func reportRates(b *testing.B, records int64, cpu float64) {
	b.ReportMetric(float64(records)/b.Elapsed().Seconds(), "records/s")
	if cpu > 0 {
		b.ReportMetric(float64(records)/cpu, "records/cpu-s")
	}
}

func readAllRecords(b *testing.B, p Plan, decode bool) int64 {
	var n int64
	for _, u := range p.Units {
		_, err := Read(b.Context(), u, func(r Record) error {
			n++
			if decode {
				if _, err := r.Image(Limits{}); err != nil {
					return err
				}
			}
			return nil
		}, func(bad BadRecord) error { return fmt.Errorf("bad record %s", bad) })
		if err != nil {
			b.Fatal(err)
		}
	}
	return n
}
