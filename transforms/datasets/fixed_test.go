package datasets

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/testing/testfiles"
)

func TestCIFAR10(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cifar-10-batches-bin")
	writeCIFAR10(t, dir, 7)
	tests := []struct {
		give      Spec
		wantN     int
		wantFiles int
	}{
		{give: Spec{Dataset: CIFAR10, Input: dir}, wantN: 35, wantFiles: 5},
		{give: Spec{Dataset: CIFAR10, Input: filepath.Dir(dir), Split: "test"}, wantN: 7, wantFiles: 1}, // the archive's parent
		{give: Spec{Dataset: CIFAR10, Input: filepath.Join(dir, "data_batch_[12].bin")}, wantN: 14, wantFiles: 2},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.give.Input, tt.give.Split), func(t *testing.T) {
			p := mustPlan(t, tt.give)
			if p.Records != int64(tt.wantN) || !p.Exact || len(p.Classes) != 10 || p.Classes[0] != "airplane" {
				t.Fatalf("plan: %d records (exact %v), classes %v; want %d", p.Records, p.Exact, p.Classes, tt.wantN)
			}
			if len(p.Warnings) != 1 {
				t.Errorf("warnings %q: want one about the published size", p.Warnings)
			}
			r := readPlan(t, p)
			if len(r.recs) != tt.wantN || len(r.bads) != 0 {
				t.Fatalf("read %d records, %d bad; want %d, 0", len(r.recs), len(r.bads), tt.wantN)
			}
			split := p.Split
			for i, rec := range r.recs {
				if rec.Index != int64(i) || rec.Key != fmt.Sprintf("%s/%06d", split, i) || rec.Label != i%7%10 {
					t.Fatalf("record %d: index %d key %s label %d", i, rec.Index, rec.Key, rec.Label)
				}
				inFile := i % 7
				if rec.Offset != int64(inFile*cifar10Record) {
					t.Errorf("record %d: offset %d, want %d", i, rec.Offset, inFile*cifar10Record)
				}
				if err := rec.Pixels.Validate(); err != nil || rec.Pixels.H != 32 || rec.Pixels.C != 3 {
					t.Fatalf("record %d: image %dx%dx%d %v", i, rec.Pixels.H, rec.Pixels.W, rec.Pixels.C, err)
				}
				for _, px := range [][3]int{{0, 0, 0}, {1, 5, 9}, {2, 31, 30}} {
					c, y, x := px[0], px[1], px[2]
					if got, want := rec.Pixels.Pix[(y*32+x)*3+c], cifarPixel(i, c, y, x); got != want {
						t.Fatalf("record %d channel %d pixel (%d,%d) = %d, want %d", i, c, y, x, got, want)
					}
				}
			}
			// The glob and folder forms must name files alike: the sources are the .bin files.
			if got := filepath.Base(r.recs[0].Source); got != "data_batch_1.bin" && got != "test_batch.bin" {
				t.Errorf("first source %s", r.recs[0].Source)
			}
		})
	}
}

func TestCIFAR100Labels(t *testing.T) {
	dir := t.TempDir()
	fine := []byte{0, 99, 42, 7}
	coarse := []byte{0, 19, 3, 11}
	testfiles.WriteFile(t, filepath.Join(dir, "train.bin"), cifarBytes(0, fine, coarse))
	for _, tt := range []struct {
		coarse bool
		want   []byte
		names  int
	}{{false, fine, 100}, {true, coarse, 20}} {
		p := mustPlan(t, Spec{Dataset: CIFAR100, Input: dir, CoarseLabels: tt.coarse})
		if len(p.Classes) != tt.names {
			t.Errorf("coarse %v: %d class names, want %d", tt.coarse, len(p.Classes), tt.names)
		}
		r := readPlan(t, p)
		for i, rec := range r.recs {
			if rec.Label != int(tt.want[i]) {
				t.Errorf("coarse %v record %d: label %d, want %d", tt.coarse, i, rec.Label, tt.want[i])
			}
			if rec.Pixels.Pix[3*5+1] != cifarPixel(i, 1, 0, 5) {
				t.Errorf("record %d: pixels shifted (the two label bytes not skipped?)", i)
			}
		}
	}
}

func TestSTL10(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "stl10_binary")
	writeSTL10(t, dir, 3, 2, 4)
	tests := []struct {
		split      string
		wantKeys   []string
		wantLabels []int
	}{
		{"train", []string{"train/000000", "train/000001", "train/000002"}, []int{0, 1, 2}},
		{"test", []string{"test/000000", "test/000001"}, []int{0, 1}},
		{"unlabeled", []string{"unlabeled/000000", "unlabeled/000001", "unlabeled/000002", "unlabeled/000003"}, []int{-1, -1, -1, -1}},
		{"train+unlabeled", []string{"train/000000", "train/000001", "train/000002",
			"unlabeled/000000", "unlabeled/000001", "unlabeled/000002", "unlabeled/000003"}, []int{0, 1, 2, -1, -1, -1, -1}},
	}
	for _, tt := range tests {
		t.Run(tt.split, func(t *testing.T) {
			p := mustPlan(t, Spec{Dataset: STL10, Input: filepath.Dir(dir), Split: tt.split, UnitRecords: 2})
			r := readPlan(t, p)
			if len(r.recs) != len(tt.wantKeys) {
				t.Fatalf("%d records, want %d", len(r.recs), len(tt.wantKeys))
			}
			for i, rec := range r.recs {
				if rec.Key != tt.wantKeys[i] || rec.Label != tt.wantLabels[i] || rec.Index != int64(i) {
					t.Errorf("record %d: key %s label %d index %d; want %s %d %d", i, rec.Key, rec.Label, rec.Index, tt.wantKeys[i], tt.wantLabels[i], i)
				}
				var n int
				fmt.Sscanf(rec.Key[len(rec.Key)-6:], "%d", &n)
				// Row y, column x of channel c: the plane is column-major on disk.
				for _, px := range [][3]int{{0, 0, 1}, {1, 2, 0}, {2, 95, 94}, {0, 50, 7}} {
					c, y, x := px[0], px[1], px[2]
					if got, want := rec.Pixels.Pix[(y*96+x)*3+c], stlPixel(n, c, y, x); got != want {
						t.Fatalf("record %d channel %d pixel (row %d, col %d) = %d, want %d", i, c, y, x, got, want)
					}
				}
			}
		})
	}
}

// TestFixedSizeBadInput: each case breaks one thing, and the error or bad record must say
// what and where.
func TestFixedSizeBadInput(t *testing.T) {
	type tc struct {
		name    string
		setup   func(t *testing.T, dir string) Spec
		planErr []string // MakePlan fails mentioning these
		bad     []string // or Read reports one bad record whose text mentions these
		good    int      // alongside this many good records
	}
	tests := []tc{
		{name: "truncated CIFAR-10 file", setup: func(t *testing.T, dir string) Spec {
			writeCIFAR10(t, dir, 3)
			data := cifarBytes(0, repeatLabels(3, 10), nil)
			testfiles.WriteFile(t, filepath.Join(dir, "data_batch_4.bin"), data[:len(data)-100])
			return Spec{Dataset: CIFAR10, Input: dir}
		}, planErr: []string{"data_batch_4.bin", "9119 bytes", "3073-byte records", "truncated"}},
		{name: "CIFAR-10 test batch one record short", setup: func(t *testing.T, dir string) Spec {
			sparseFile(t, filepath.Join(dir, "test_batch.bin"), 9999*cifar10Record)
			return Spec{Dataset: CIFAR10, Input: dir, Split: "test"}
		}, planErr: []string{"test_batch.bin holds 9999 records, 1 fewer than the published file's 10000", "cut short"}},
		{name: "CIFAR-10 batch one record short beside samples", setup: func(t *testing.T, dir string) Spec {
			writeCIFAR10(t, dir, 3)
			sparseFile(t, filepath.Join(dir, "data_batch_3.bin"), 9999*cifar10Record)
			return Spec{Dataset: CIFAR10, Input: dir}
		}, planErr: []string{"data_batch_3.bin holds 9999 records", "published file's 10000"}},
		{name: "CIFAR-100 file of CIFAR-10 records", setup: func(t *testing.T, dir string) Spec {
			testfiles.WriteFile(t, filepath.Join(dir, "test.bin"), cifarBytes(0, repeatLabels(2, 10), nil))
			return Spec{Dataset: CIFAR100, Input: dir, Split: "test"}
		}, planErr: []string{"test.bin", "6146 bytes", "3074-byte records"}},
		{name: "missing batches", setup: func(t *testing.T, dir string) Spec {
			writeCIFAR10(t, dir, 1)
			os.Remove(filepath.Join(dir, "data_batch_3.bin"))
			os.Remove(filepath.Join(dir, "data_batch_5.bin"))
			return Spec{Dataset: CIFAR10, Input: dir}
		}, planErr: []string{"lacks data_batch_3.bin, data_batch_5.bin"}},
		{name: "empty folder", setup: func(t *testing.T, dir string) Spec {
			return Spec{Dataset: CIFAR10, Input: dir, Split: "test"}
		}, planErr: []string{"lacks test_batch.bin"}},
		{name: "empty file", setup: func(t *testing.T, dir string) Spec {
			testfiles.WriteFile(t, filepath.Join(dir, "test_batch.bin"), nil)
			return Spec{Dataset: CIFAR10, Input: dir, Split: "test"}
		}, planErr: []string{"test_batch.bin is empty"}},
		{name: "glob matching nothing", setup: func(t *testing.T, dir string) Spec {
			writeCIFAR10(t, dir, 1)
			return Spec{Dataset: CIFAR10, Input: filepath.Join(dir, "nothing_*.bin")}
		}, planErr: []string{"nothing_*.bin matches no files"}},
		{name: "CIFAR-10 label 12", setup: func(t *testing.T, dir string) Spec {
			testfiles.WriteFile(t, filepath.Join(dir, "test_batch.bin"), cifarBytes(0, []byte{1, 12, 3}, nil))
			return Spec{Dataset: CIFAR10, Input: dir, Split: "test"}
		}, bad: []string{"test_batch.bin", "byte 3073", "test/000001", "label 12 outside 0..9"}, good: 2},
		{name: "CIFAR-100 coarse label 20", setup: func(t *testing.T, dir string) Spec {
			testfiles.WriteFile(t, filepath.Join(dir, "train.bin"), cifarBytes(0, []byte{5, 6}, []byte{20, 1}))
			return Spec{Dataset: CIFAR100, Input: dir}
		}, bad: []string{"train.bin", "byte 0", "coarse label 20"}, good: 1},
		{name: "STL-10 label 0", setup: func(t *testing.T, dir string) Spec {
			writeSTL10(t, dir, 2, 1, 1)
			testfiles.WriteFile(t, filepath.Join(dir, "train_y.bin"), []byte{1, 0})
			return Spec{Dataset: STL10, Input: dir}
		}, bad: []string{"train_y.bin", "byte 1", "train/000001", "label 0 outside 1..10"}, good: 1},
		{name: "STL-10 label 11", setup: func(t *testing.T, dir string) Spec {
			writeSTL10(t, dir, 2, 1, 1)
			testfiles.WriteFile(t, filepath.Join(dir, "train_y.bin"), []byte{11, 10})
			return Spec{Dataset: STL10, Input: dir}
		}, bad: []string{"train_y.bin", "byte 0", "label 11"}, good: 1},
		{name: "STL-10 labels and images disagree", setup: func(t *testing.T, dir string) Spec {
			writeSTL10(t, dir, 3, 1, 1)
			testfiles.WriteFile(t, filepath.Join(dir, "train_y.bin"), []byte{1, 2})
			return Spec{Dataset: STL10, Input: dir}
		}, planErr: []string{"train_X.bin holds 3 images", "train_y.bin holds 2 labels"}},
		{name: "STL-10 truncated images", setup: func(t *testing.T, dir string) Spec {
			writeSTL10(t, dir, 1, 1, 2)
			testfiles.WriteFile(t, filepath.Join(dir, "unlabeled_X.bin"), stlBytes(0, 2)[:stl10Record+5])
			return Spec{Dataset: STL10, Input: dir, Split: "train+unlabeled"}
		}, planErr: []string{"unlabeled_X.bin", "27653 bytes", "27648-byte records"}},
		{name: "STL-10 missing unlabeled", setup: func(t *testing.T, dir string) Spec {
			writeSTL10(t, dir, 1, 1, 1)
			os.Remove(filepath.Join(dir, "unlabeled_X.bin"))
			return Spec{Dataset: STL10, Input: dir, Split: "train+unlabeled"}
		}, planErr: []string{"lacks unlabeled_X.bin"}},
		{name: "unknown split", setup: func(t *testing.T, dir string) Spec {
			return Spec{Dataset: STL10, Input: dir, Split: "val"}
		}, planErr: []string{`no split "val"`, "train+unlabeled"}},
		{name: "unknown dataset", setup: func(t *testing.T, dir string) Spec {
			return Spec{Dataset: "cifar11", Input: dir}
		}, planErr: []string{`unknown dataset "cifar11"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.setup(t, t.TempDir())
			if tt.planErr != nil {
				err := planErr(t, s)
				t.Log(err)
				wantErrorMentions(t, err, tt.planErr...)
				return
			}
			r := readPlan(t, mustPlan(t, s))
			if len(r.bads) != 1 || len(r.recs) != tt.good {
				t.Fatalf("%d records and bad records %v; want %d and one", len(r.recs), r.bads, tt.good)
			}
			text := r.bads[0].String()
			t.Log(text)
			for _, want := range tt.bad {
				if !contains(text, want) {
					t.Errorf("bad record %q does not mention %q", text, want)
				}
			}
		})
	}
}

// sparseFile makes a file of size zero bytes without writing them: planning reads sizes only.
func sparseFile(t *testing.T, p string, size int64) {
	t.Helper()
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(f.Truncate(size), f.Close()); err != nil {
		t.Fatal(err)
	}
}

// TestSampleOfAPublishedFileIsReadWithAWarning: a file more than 1% short of the published
// one is a sample (a test's, a trial's), not a cut copy: planned, with the count warning.
func TestSampleOfAPublishedFileIsReadWithAWarning(t *testing.T) {
	dir := t.TempDir()
	sparseFile(t, filepath.Join(dir, "test_batch.bin"), 9899*cifar10Record)
	p := mustPlan(t, Spec{Dataset: CIFAR10, Input: dir, Split: "test"})
	if p.Records != 9899 || len(p.Warnings) != 1 || !contains(p.Warnings[0], "the published dataset has 10000") {
		t.Errorf("plan of %d records, warnings %q", p.Records, p.Warnings)
	}
}

// TestReadRefusesChangedFile: a unit planned on a good file and read after the file was cut
// short must fail naming the file, not read less.
func TestReadRefusesChangedFile(t *testing.T) {
	dir := t.TempDir()
	testfiles.WriteFile(t, filepath.Join(dir, "test_batch.bin"), cifarBytes(0, repeatLabels(4, 10), nil))
	p := mustPlan(t, Spec{Dataset: CIFAR10, Input: dir, Split: "test"})
	testfiles.WriteFile(t, filepath.Join(dir, "test_batch.bin"), cifarBytes(0, repeatLabels(3, 10), nil))
	_, err := Read(t.Context(), p.Units[0], func(Record) error { return nil }, func(BadRecord) error { return nil })
	wantErrorMentions(t, err, "test_batch.bin", "9219 bytes", "truncated or changed")
}
