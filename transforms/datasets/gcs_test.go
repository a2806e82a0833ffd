package datasets

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/internal/testing/testfiles"

	"github.com/dcl-beam/dcl-beam/internal/testing/gcstest"
)

// upload copies a local folder to a gs:// prefix.
func upload(t *testing.T, local, remote string) {
	t.Helper()
	err := filepath.WalkDir(local, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(local, p)
		return storage.WriteFile(t.Context(), storage.Join(remote, strings.Split(filepath.ToSlash(rel), "/")...), data)
	})
	if err != nil {
		t.Fatalf("uploading %s to %s: %v", local, remote, err)
	}
}

// TestGCSInput: the same datasets read from a GCS emulator give the same records as read
// from disk, for a fixed-size format (ranged reads), gzipped IDX (a stream), an image folder
// (listing) and an outer tar (seeking past members); bad input is reported alike.
func TestGCSInput(t *testing.T) {
	bucket := gcstest.Start(t, "datasets")
	local := t.TempDir()
	writeCIFAR10(t, filepath.Join(local, "cifar", "cifar-10-batches-bin"), 4)
	writeIDX(t, filepath.Join(local, "fashion"), 6, 2, true)
	writeFolder(t, filepath.Join(local, "folder"), map[string][]byte{
		"b/1.jpg": testfiles.JPEG(t, 5, 4, 1), "b/2.png": testfiles.PNG(t, 3, 3, 2), "a/x/3.JPEG": testfiles.JPEG(t, 4, 4, 3),
		"a/bad.jpg": []byte("not a jpeg"), "notes.txt": []byte("hi"),
	})
	sub := ImageNet100Synsets()
	writeOuterTar(t, filepath.Join(local, "ILSVRC2012_img_train.tar"), sub, 2)
	upload(t, local, bucket+"/data")

	tests := []struct {
		name string
		spec Spec // Input relative to the data folder
	}{
		{"cifar10", Spec{Dataset: CIFAR10, Input: "cifar", UnitRecords: 3}},
		{"fashion-mnist gzipped", Spec{Dataset: FashionMNIST, Input: "fashion", UnitRecords: 4}},
		{"folder", Spec{Dataset: Folder, Input: "folder", UnitRecords: 1}},
		{"imagenet100 outer tar", Spec{Dataset: ImageNet100, Input: "ILSVRC2012_img_train.tar"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			read := func(root string) ([]string, Plan) {
				s := tt.spec
				s.Input = storage.Join(root, s.Input)
				p := mustPlan(t, s)
				r := readPlan(t, p)
				var out []string
				for _, rec := range r.recs {
					if !strings.HasPrefix(rec.Source, root) {
						t.Errorf("record %s from %s, outside %s", rec.Key, rec.Source, root)
					}
					rec.Source = strings.TrimPrefix(rec.Source, root)
					out = append(out, fingerprint(rec))
				}
				for _, b := range r.bads {
					out = append(out, "bad "+strings.ReplaceAll(b.String(), root, ""))
				}
				return out, p
			}
			want, lp := read(local)
			got, gp := read(bucket + "/data")
			if !slices.Equal(got, want) || len(want) == 0 {
				t.Errorf("gs:// read differently:\n got %q\nwant %q", got, want)
			}
			if gp.Ignored != lp.Ignored || !slices.Equal(gp.Classes, lp.Classes) {
				t.Errorf("gs:// plan: ignored %d, classes %q; local %d, %q", gp.Ignored, gp.Classes, lp.Ignored, lp.Classes)
			}
		})
	}
	t.Run("missing", func(t *testing.T) {
		for _, d := range []string{CIFAR10, Folder, FashionMNIST} {
			wantErrorMentions(t, planErr(t, Spec{Dataset: d, Input: bucket + "/nothing"}), "input "+bucket+"/nothing does not exist")
		}
		wantErrorMentions(t, planErr(t, Spec{Dataset: CIFAR10, Input: bucket + "/data/fashion"}), bucket+"/data/fashion", "lacks data_batch_1.bin")
	})
}
