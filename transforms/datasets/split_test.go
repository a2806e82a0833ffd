package datasets

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/testing/testfiles"
)

// TestUnitSizeDoesNotChangeRecords: reading a split as many small units, as one big unit, or
// as units that went through JSON (as Beam sends them to workers) yields the same records
// and bad records, in the same order.
func TestUnitSizeDoesNotChangeRecords(t *testing.T) {
	type fixture func(t *testing.T, dir string) Spec
	tests := []struct {
		name  string
		setup fixture
	}{
		{"cifar10 with a bad label", func(t *testing.T, dir string) Spec {
			writeCIFAR10(t, dir, 5)
			testfiles.WriteFile(t, filepath.Join(dir, "data_batch_2.bin"), cifarBytes(5, []byte{1, 2, 30, 4, 5}, nil))
			return Spec{Dataset: CIFAR10, Input: dir}
		}},
		{"cifar100 coarse", func(t *testing.T, dir string) Spec {
			testfiles.WriteFile(t, filepath.Join(dir, "test.bin"), cifarBytes(0, repeatLabels(9, 100), repeatLabels(9, 20)))
			return Spec{Dataset: CIFAR100, Input: dir, Split: "test", CoarseLabels: true}
		}},
		{"stl10 train+unlabeled", func(t *testing.T, dir string) Spec {
			writeSTL10(t, dir, 3, 1, 4)
			return Spec{Dataset: STL10, Input: dir, Split: "train+unlabeled"}
		}},
		{"idx", func(t *testing.T, dir string) Spec {
			writeIDX(t, dir, 11, 1, false)
			return Spec{Dataset: MNIST, Input: dir}
		}},
		{"idx gzipped", func(t *testing.T, dir string) Spec {
			writeIDX(t, dir, 11, 1, true)
			return Spec{Dataset: FashionMNIST, Input: dir}
		}},
		{"folder with a bad image", func(t *testing.T, dir string) Spec {
			files := map[string][]byte{"b/bad.png": []byte("nope")}
			for i := range 7 {
				files[fmt.Sprintf("a/%d.jpg", i)] = testfiles.JPEG(t, 3, 3, i)
				files[fmt.Sprintf("b/%d.png", i)] = testfiles.PNG(t, 2, 2, i)
			}
			writeFolder(t, dir, files)
			return Spec{Dataset: Folder, Input: dir}
		}},
		{"imagenet val, flat", func(t *testing.T, dir string) Spec {
			sub := ImageNet100Synsets()
			var labels []byte
			for i := range 6 {
				name := fmt.Sprintf("ILSVRC2012_val_%08d.JPEG", i)
				testfiles.WriteFile(t, filepath.Join(dir, name), testfiles.JPEG(t, 4, 4, i))
				labels = fmt.Appendf(labels, "%s %s\n", name, sub[i*7])
			}
			testfiles.WriteFile(t, filepath.Join(dir, "unlabelled.JPEG"), testfiles.JPEG(t, 4, 4, 1))
			testfiles.WriteFile(t, filepath.Join(dir, "labels.txt"), labels)
			return Spec{Dataset: ImageNet100, Input: dir, Split: "val", LabelsFile: filepath.Join(dir, "labels.txt")}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := tt.setup(t, t.TempDir())
			read := func(p Plan) []string {
				r := readPlan(t, p)
				var out []string
				for _, rec := range r.recs {
					out = append(out, fingerprint(rec))
				}
				for _, b := range r.bads {
					out = append(out, "bad "+b.String())
				}
				return out
			}
			spec.UnitRecords = 1 << 30
			whole := mustPlan(t, spec) // one unit per file or class folder
			spec.UnitRecords = 2
			small := mustPlan(t, spec)
			if len(small.Units) <= len(whole.Units) || small.Records != whole.Records {
				t.Fatalf("%d small units and %d whole ones, %d records vs %d", len(small.Units), len(whole.Units), small.Records, whole.Records)
			}
			want := read(whole)
			if got := read(small); !slices.Equal(got, want) {
				t.Errorf("small units read differently:\n got %q\nwant %q", got, want)
			}
			data, err := json.Marshal(small)
			if err != nil {
				t.Fatal(err)
			}
			var decoded Plan
			if err := json.Unmarshal(data, &decoded); err != nil {
				t.Fatal(err)
			}
			if got := read(decoded); !slices.Equal(got, want) {
				t.Errorf("units through JSON read differently")
			}
			if len(want) == 0 {
				t.Error("no records")
			}
		})
	}
}
