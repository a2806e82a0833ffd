package datasets

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/testing/testfiles"
)

// fetchFingerprint is what Fetch must give back of a record: all Read gave but an encoded
// image's header facts (Format, Width, Height), which Fetch leaves to the decoder.
func fetchFingerprint(r Record) string {
	r.Format, r.Width, r.Height = "", 0, 0
	if r.Encoded == nil {
		r.Width, r.Height = r.Pixels.W, r.Pixels.H
	}
	return fingerprint(r) + "|" + r.Ref
}

// TestFetchFindsEveryRecordAgain: for every kind, the records of a plan fetched again by
// their references, in a shuffled order, through units stripped for shipping (ForFetch),
// are the records Read gave.
func TestFetchFindsEveryRecordAgain(t *testing.T) {
	sub := ImageNet100Synsets()
	tests := []struct {
		name string
		spec func(t *testing.T, dir string) Spec
	}{
		{"cifar10", func(t *testing.T, dir string) Spec {
			writeCIFAR10(t, dir, 7)
			return Spec{Dataset: CIFAR10, Input: dir, UnitRecords: 4}
		}},
		{"stl10 train+unlabeled", func(t *testing.T, dir string) Spec {
			writeSTL10(t, dir, 3, 1, 4)
			return Spec{Dataset: STL10, Input: dir, Split: "train+unlabeled", UnitRecords: 2}
		}},
		{"idx gzipped", func(t *testing.T, dir string) Spec {
			writeIDX(t, dir, 9, 2, true)
			return Spec{Dataset: FashionMNIST, Input: dir, UnitRecords: 4}
		}},
		{"class folders", func(t *testing.T, dir string) Spec {
			return Spec{Dataset: ImageNet100, Input: writeImageNetFolder(t, dir, sub, 2), UnitRecords: 3}
		}},
		{"class tars", func(t *testing.T, dir string) Spec {
			return Spec{Dataset: ImageNet100, Input: writeImageNetTars(t, dir, sub, 2)}
		}},
		{"outer tar", func(t *testing.T, dir string) Spec {
			return Spec{Dataset: ImageNet100, Input: writeOuterTar(t, filepath.Join(dir, trainTar), sub, 2)}
		}},
		{"flat val folder", func(t *testing.T, dir string) Spec {
			var labels strings.Builder
			for i := range 5 {
				name := fmt.Sprintf("ILSVRC2012_val_%08d.JPEG", i+1)
				testfiles.WriteFile(t, filepath.Join(dir, "val", name), testfiles.JPEG(t, 5, 4, i))
				fmt.Fprintf(&labels, "%s %s\n", name, sub[i*7])
			}
			lf := filepath.Join(dir, "labels.txt")
			testfiles.WriteFile(t, lf, []byte(labels.String()))
			return Spec{Dataset: ImageNet100, Input: filepath.Join(dir, "val"), Split: "val", LabelsFile: lf, UnitRecords: 2}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustPlan(t, tt.spec(t, t.TempDir()))
			var refs []Ref
			want := map[Ref]string{}
			for i, u := range p.Units {
				if _, err := Read(t.Context(), u, func(r Record) error {
					ref := RefOf(i, &r)
					refs = append(refs, ref)
					want[ref] = fetchFingerprint(r)
					return nil
				}, func(BadRecord) error { return nil }); err != nil {
					t.Fatal(err)
				}
			}
			rand.New(rand.NewPCG(1, 2)).Shuffle(len(refs), func(i, j int) { refs[i], refs[j] = refs[j], refs[i] })
			units := make([]Unit, len(p.Units))
			for i, u := range p.Units {
				units[i] = u.ForFetch()
			}
			f := NewFetcher(units)
			defer f.Close()
			got := make([]string, len(refs))
			// In windows of 5, as a pipeline fetches them.
			for start := 0; start < len(refs); start += 5 {
				window := refs[start:min(start+5, len(refs))]
				if err := f.Fetch(t.Context(), window, func(i int, r Record) error {
					if got[start+i] != "" {
						return fmt.Errorf("reference %d given twice", start+i)
					}
					got[start+i] = fetchFingerprint(r)
					return nil
				}); err != nil {
					t.Fatal(err)
				}
			}
			for i, r := range refs {
				if got[i] != want[r] {
					t.Errorf("reference %+v fetched\n%s, want\n%s", r, got[i], want[r])
				}
			}
		})
	}
}

// TestFetchLeavesOutARecordGoneBad: a fixed-size record whose label went out of range after
// it was read is left out, for the caller to report; a folder's file that went missing is an
// error naming it.
func TestFetchLeavesOutARecordGoneBad(t *testing.T) {
	dir := t.TempDir()
	testfiles.WriteFile(t, filepath.Join(dir, "test_batch.bin"), cifarBytes(0, []byte{1, 2, 3}, nil))
	p := mustPlan(t, Spec{Dataset: CIFAR10, Input: dir, Split: "test"})
	testfiles.WriteFile(t, filepath.Join(dir, "test_batch.bin"), cifarBytes(0, []byte{1, 12, 3}, nil))
	var got []int64
	err := NewFetcher(p.Units).Fetch(t.Context(), []Ref{{Index: 0}, {Index: 1}, {Index: 2}}, func(_ int, r Record) error {
		got = append(got, r.Index)
		return nil
	})
	if err != nil || fmt.Sprint(got) != "[0 2]" {
		t.Errorf("fetched %v, %v; want records 0 and 2", got, err)
	}

	root := writeImageNetFolder(t, t.TempDir(), ImageNet100Synsets(), 1)
	p = mustPlan(t, Spec{Dataset: ImageNet100, Input: root})
	var ref Ref
	if _, err := Read(t.Context(), p.Units[3], func(r Record) error { ref = RefOf(3, &r); return nil }, func(BadRecord) error { return nil }); err != nil {
		t.Fatal(err)
	}
	name, _ := imagenetImage(t, ImageNet100Synsets()[3], 0)
	gone := filepath.Join(root, ImageNet100Synsets()[3], name)
	if err := os.Remove(gone); err != nil {
		t.Fatal(err)
	}
	err = NewFetcher(p.Units).Fetch(t.Context(), []Ref{ref}, func(int, Record) error { return nil })
	wantErrorMentions(t, err, gone)
}
