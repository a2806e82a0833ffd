package datasets

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/testing/testfiles"
	"github.com/dcl-beam/dcl-beam/internal/usage"

	"github.com/dcl-beam/dcl-beam/internal/testing/fashionmnist"
)

func TestIDXPlainAndGzipAgree(t *testing.T) {
	plain, zipped := t.TempDir(), t.TempDir()
	writeIDX(t, plain, 23, 5, false)
	writeIDX(t, zipped, 23, 5, true)
	for _, split := range []string{"train", "test"} {
		var got [2][]string
		for i, dir := range []string{plain, zipped} {
			p := mustPlan(t, Spec{Dataset: FashionMNIST, Input: dir, Split: split, UnitRecords: 4})
			if p.Classes[9] != "Ankle boot" {
				t.Errorf("classes %q", p.Classes)
			}
			r := readPlan(t, p)
			for _, rec := range r.recs {
				if rec.Pixels.C != 1 || rec.Pixels.H != 28 || rec.Pixels.W != 28 {
					t.Fatalf("%s: image %dx%dx%d", rec.Key, rec.Pixels.H, rec.Pixels.W, rec.Pixels.C)
				}
				got[i] = append(got[i], fingerprintNoSource(rec))
			}
		}
		if !slices.Equal(got[0], got[1]) || len(got[0]) == 0 {
			t.Errorf("%s: plain and gzipped files read differently (%d vs %d records)", split, len(got[0]), len(got[1]))
		}
	}
	// The first image of the fixture is bytes 0, 13, 26, ... (i*13 mod 256).
	r := readPlan(t, mustPlan(t, Spec{Dataset: MNIST, Input: zipped}))
	if px, want := r.recs[1].Pixels.Pix[3], byte((784+3)*13%256); px != want {
		t.Errorf("record 1 pixel 3 = %d, want %d", px, want)
	}
	if r.recs[1].Offset != 16+784 {
		t.Errorf("record 1 offset %d, want %d", r.recs[1].Offset, 16+784)
	}
}

func fingerprintNoSource(r Record) string {
	r.Source = ""
	return fingerprint(r)
}

func TestIDXGenericClasses(t *testing.T) {
	dir := t.TempDir()
	testfiles.WriteFile(t, filepath.Join(dir, "train-images-idx3-ubyte"), idxImages(4, 2, 3))
	testfiles.WriteFile(t, filepath.Join(dir, "train-labels-idx1-ubyte"), idxLabels([]byte{0, 4, 2, 4}))
	p := mustPlan(t, Spec{Dataset: IDX, Input: dir})
	if want := []string{"0", "1", "2", "3", "4"}; !slices.Equal(p.Classes, want) {
		t.Errorf("classes %q, want %q", p.Classes, want)
	}
	r := readPlan(t, p)
	if len(r.recs) != 4 || r.recs[1].Label != 4 || r.recs[0].Pixels.H != 2 || r.recs[0].Pixels.W != 3 {
		t.Errorf("records %+v", r.recs)
	}
}

func TestIDXBadInput(t *testing.T) {
	images, labels := idxImages(5, 28, 28), idxLabels(repeatLabels(5, 10))
	tests := []struct {
		name    string
		images  []byte
		labels  []byte
		zip     bool
		planErr []string
		bad     []string
	}{
		{name: "wrong image magic", images: append([]byte{0, 0, 8, 1}, images[4:]...), labels: labels,
			planErr: []string{"train-images-idx3-ubyte", "wrong magic number 00 00 08 01", "00 00 08 03"}},
		{name: "wrong label magic, gzipped", images: images, labels: append([]byte{0x12, 0x34, 8, 1}, labels[4:]...), zip: true,
			planErr: []string{"train-labels-idx1-ubyte.gz", "wrong magic number 12 34 08 01"}},
		{name: "float images", images: append([]byte{0, 0, 0x0D, 3}, images[4:]...), labels: labels,
			planErr: []string{"element type 0x0d"}},
		{name: "counts disagree", images: images, labels: idxLabels(repeatLabels(4, 10)),
			planErr: []string{"holds 5 images", "holds 4 labels"}},
		{name: "truncated images", images: images[:len(images)-10], labels: labels,
			planErr: []string{"train-images-idx3-ubyte", "truncated", "3926 bytes", "5 records of 784 bytes"}},
		{name: "images one record short of the header", images: images[:len(images)-28*28], labels: labels,
			planErr: []string{"train-images-idx3-ubyte", "truncated", "3152 bytes", "its header promises 5 records of 784 bytes"}},
		{name: "images one record short of the header, gzipped", images: images[:len(images)-28*28], labels: labels, zip: true,
			planErr: []string{"train-images-idx3-ubyte.gz", "decompressed", "truncated", "3152 bytes", "5 records"}},
		{name: "truncated images, gzipped", images: images[:len(images)-10], labels: labels, zip: true,
			planErr: []string{"train-images-idx3-ubyte.gz", "decompressed", "truncated", "3926 bytes"}},
		{name: "cut gzip stream", images: images, labels: labels, zip: true,
			planErr: []string{"train-images-idx3-ubyte.gz", "unexpected EOF"}},
		{name: "trailing bytes", images: append(slices.Clone(images), 1, 2, 3), labels: labels,
			planErr: []string{"longer than its header says", "3939 bytes"}},
		{name: "header cut short", images: images[:10], labels: labels,
			planErr: []string{"header needs 16 bytes", "has 10"}},
		{name: "label 10 in fashion-mnist", images: images, labels: idxLabels([]byte{0, 1, 10, 3, 4}),
			bad: []string{"train-labels-idx1-ubyte", "byte 10", "train/000002", "label 10 outside 0..9"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			im, lb, suffix := tt.images, tt.labels, ""
			if tt.zip {
				im, lb, suffix = testfiles.Gzip(t, im), testfiles.Gzip(t, lb), ".gz"
				if tt.name == "cut gzip stream" {
					im = im[:len(im)-30]
				}
			}
			testfiles.WriteFile(t, filepath.Join(dir, "train-images-idx3-ubyte"+suffix), im)
			testfiles.WriteFile(t, filepath.Join(dir, "train-labels-idx1-ubyte"+suffix), lb)
			s := Spec{Dataset: FashionMNIST, Input: dir}
			if tt.planErr != nil {
				err := planErr(t, s)
				t.Log(err)
				wantErrorMentions(t, err, tt.planErr...)
				return
			}
			r := readPlan(t, mustPlan(t, s))
			if len(r.bads) != 1 || len(r.recs) != 4 {
				t.Fatalf("%d records, bad %v", len(r.recs), r.bads)
			}
			t.Log(r.bads[0])
			for _, want := range tt.bad {
				if !contains(r.bads[0].String(), want) {
					t.Errorf("bad record %q does not mention %q", r.bads[0], want)
				}
			}
		})
	}
}

// A Fashion-MNIST or MNIST file a record short of the published file, its header saying so,
// is a cut copy and refused, as CIFAR's is; a smaller file is a sample, read with a warning.
func TestIDXCutCopiesAreRefused(t *testing.T) {
	const published = 10000 // the test split's
	for _, tt := range []struct {
		dataset string
		n       int
		want    []string
	}{
		{FashionMNIST, published - 1, []string{"fashion-mnist test", "t10k-images-idx3-ubyte", "holds 9999 records, 1 fewer than the published file's 10000", "cut short"}},
		{MNIST, published - published/100, []string{"mnist test", "holds 9900 records, 100 fewer"}},
		{FashionMNIST, published - published/100 - 1, nil},
		{FashionMNIST, published, nil},
	} {
		dir := t.TempDir()
		testfiles.WriteFile(t, filepath.Join(dir, "t10k-images-idx3-ubyte"), idxImages(tt.n, 28, 28))
		testfiles.WriteFile(t, filepath.Join(dir, "t10k-labels-idx1-ubyte"), idxLabels(repeatLabels(tt.n, 10)))
		s := Spec{Dataset: tt.dataset, Input: dir, Split: "test"}
		if tt.want != nil {
			wantErrorMentions(t, planErr(t, s), tt.want...)
			continue
		}
		p := mustPlan(t, s)
		if p.Records != int64(tt.n) || (tt.n < published) != (len(p.Warnings) == 1) {
			t.Errorf("%s of %d records: %d records, warnings %q", tt.dataset, tt.n, p.Records, p.Warnings)
		}
	}
}

func TestIDXMissingFiles(t *testing.T) {
	dir := t.TempDir()
	writeIDX(t, dir, 2, 2, true)
	os.Remove(filepath.Join(dir, "t10k-labels-idx1-ubyte.gz"))
	wantErrorMentions(t, planErr(t, Spec{Dataset: MNIST, Input: dir, Split: "test"}),
		"has no labels file", "t10k-labels-idx1-ubyte")
}

// TestFashionMNIST reads the real data set: counts, class balance, and the pixel mean and
// standard deviation that every Fashion-MNIST normalisation uses (train: 0.2860, 0.3530).
func TestFashionMNIST(t *testing.T) {
	dir := fashionmnist.Dir(t)
	tests := []struct {
		split         string
		n, perClass   int
		mean, std     float64
		wantFirstKeys string
	}{
		{"train", 60000, 6000, 0.2860, 0.3530, "train/000000"},
		{"test", 10000, 1000, 0.2868, 0.3524, "test/000000"},
	}
	for _, tt := range tests {
		t.Run(tt.split, func(t *testing.T) {
			// Two units: each decompresses its file from the start, so more would only
			// repeat work (splitting is tested on small files).
			p := mustPlan(t, Spec{Dataset: FashionMNIST, Input: dir, Split: tt.split, UnitRecords: tt.n/2 + 1})
			if p.Records != int64(tt.n) || len(p.Warnings) != 0 {
				t.Fatalf("plan: %d records, warnings %q", p.Records, p.Warnings)
			}
			var hist [10]int
			var values [256]int64 // pixel value histogram: the statistics come from it
			var n int
			for _, u := range p.Units {
				_, err := Read(t.Context(), u, func(r Record) error {
					if n == 0 && r.Key != tt.wantFirstKeys {
						t.Errorf("first key %s", r.Key)
					}
					n++
					hist[r.Label]++
					for _, v := range r.Pixels.Pix {
						values[v]++
					}
					return nil
				}, func(b BadRecord) error { t.Errorf("bad record %s", b); return nil })
				if err != nil {
					t.Fatal(err)
				}
			}
			if n != tt.n {
				t.Errorf("%d records, want %d", n, tt.n)
			}
			for c, got := range hist {
				if got != tt.perClass {
					t.Errorf("class %d (%s): %d images, want %d", c, p.Classes[c], got, tt.perClass)
				}
			}
			var sum, sumSq float64
			for v, count := range values {
				f := float64(v) / 255
				sum += f * float64(count)
				sumSq += f * f * float64(count)
			}
			pixels := float64(n * 28 * 28)
			mean := sum / pixels
			std := math.Sqrt(sumSq/pixels - mean*mean)
			if math.Abs(mean-tt.mean) > 1e-4 || math.Abs(std-tt.std) > 1e-4 {
				t.Errorf("pixel mean %.5f std %.5f, want %.4f %.4f", mean, std, tt.mean, tt.std)
			}
		})
	}
}

// A byte flipped in the middle of Fashion-MNIST's gzipped images (deflate decodes it into
// garbage pixels, with no error of its own) is found when the split is planned, whatever
// part of it is read afterwards: gzip's CRC-32 sits at the end of the stream, past what a
// --limit reads. Also in a gzipped labels file, and with the generic IDX dataset, which scans
// the labels itself.
func TestIDXCorruptGzipIsRefusedBeforeAnyRecord(t *testing.T) {
	src := fashionmnist.Dir(t)
	tests := []struct {
		dataset, file string
	}{
		{FashionMNIST, "train-images-idx3-ubyte.gz"},
		{FashionMNIST, "train-labels-idx1-ubyte.gz"},
		{IDX, "train-labels-idx1-ubyte.gz"},
	}
	for _, tt := range tests {
		t.Run(tt.dataset+"/"+tt.file, func(t *testing.T) {
			dir := t.TempDir()
			for _, name := range []string{"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"} {
				data, err := os.ReadFile(filepath.Join(src, name))
				if err != nil {
					t.Fatal(err)
				}
				if name == tt.file {
					data[len(data)/2] ^= 0x10
				}
				testfiles.WriteFile(t, filepath.Join(dir, name), data)
			}
			err := planErr(t, Spec{Dataset: tt.dataset, Input: dir, Split: "train"})
			wantErrorMentions(t, err, tt.file, "CRC-32", "before any record")
		})
	}
}

// An input that is not there is reported as such, not as a folder lacking some file; a split
// the dataset does not have is a usage error.
func TestPlanMissingInputAndUnknownSplit(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nonexistent")
	for _, d := range []string{FashionMNIST, IDX, CIFAR10, STL10, Folder, ImageNet} {
		wantErrorMentions(t, planErr(t, Spec{Dataset: d, Input: missing}), "input "+missing+" does not exist")
	}
	dir := t.TempDir()
	writeIDX(t, dir, 2, 2, true)
	err := planErr(t, Spec{Dataset: IDX, Input: dir, Split: "val"})
	wantErrorMentions(t, err, "--split=val", "want one of train, test")
	if !usage.Is(err) {
		t.Errorf("an unknown split is not a usage error: %v", err)
	}
}

// TestIDXPlanningStopsWhenCancelled: planning reads a gzipped IDX file to its end (its
// CRC-32 vouches for the records); the first Ctrl-C or SIGTERM stops that read, rather than
// waiting for the whole stream (the IDX planner once ignored the first SIGTERM).
func TestIDXPlanningStopsWhenCancelled(t *testing.T) {
	dir := t.TempDir()
	writeIDX(t, dir, 200, 10, true)
	for _, dataset := range []string{IDX, FashionMNIST} {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err := MakePlan(ctx, Spec{Dataset: dataset, Input: dir})
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s: planning with a cancelled context = %v, want context.Canceled", dataset, err)
		}
	}
}
