package datasets

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/internal/testing/gcstest"
	"github.com/dcl-beam/dcl-beam/internal/testing/testfiles"
)

// writeValFlat writes a flat val folder of n images per synset, labelled by Kaggle's csv at
// csvDir, and returns the folder.
func writeValFlat(t testing.TB, dir, csvDir string, synsets []string, n int) string {
	var csv strings.Builder
	csv.WriteString("ImageId,PredictionString\n")
	i := 0
	for _, s := range synsets {
		for range n {
			i++
			name := fmt.Sprintf("ILSVRC2012_val_%08d", i)
			testfiles.WriteFile(t, filepath.Join(dir, name+".JPEG"), testfiles.JPEG(t, 5, 5, 1000+i))
			fmt.Fprintf(&csv, "%s,%s 1 2 3 4\n", name, s)
		}
	}
	testfiles.WriteFile(t, filepath.Join(csvDir, valLabelsFile), []byte(csv.String()))
	return dir
}

// writeValSynsets writes a val folder of synset folders (valprep.sh's layout).
func writeValSynsets(t testing.TB, dir string, synsets []string, n int) string {
	for j, s := range synsets {
		for i := range n {
			testfiles.WriteFile(t, filepath.Join(dir, s, fmt.Sprintf("ILSVRC2012_val_%08d.JPEG", j*n+i+1)), testfiles.JPEG(t, 5, 5, 2000+j*n+i))
		}
	}
	return dir
}

// splitDigests reads a plan and returns the sha-free identity of its records: the source
// file (or tar member) of each, which tells the train images from the val images.
func splitSources(t *testing.T, p Plan) []string {
	r := readPlan(t, p)
	var out []string
	for _, rec := range r.recs {
		out = append(out, filepath.Base(rec.Source)+"|"+rec.Member)
	}
	return out
}

// TestImageNetRootLayouts: from one dataset root, in every published layout, the train split
// reads the train images and the val split the val images, with the labels of their own
// layout, and the manifest's sources (Plan.Sources) of the two never overlap.
func TestImageNetRootLayouts(t *testing.T) {
	sub := ImageNet100Synsets()
	layouts := []struct {
		name  string
		setup func(t *testing.T, root string)
	}{
		{"train and val folders, val flat with the csv in val", func(t *testing.T, root string) {
			writeImageNetFolder(t, filepath.Join(root, "train"), sub, 1)
			writeValFlat(t, filepath.Join(root, "val"), filepath.Join(root, "val"), sub, 1)
		}},
		{"train and val folders, val flat with the csv at the root", func(t *testing.T, root string) {
			writeImageNetFolder(t, filepath.Join(root, "train"), sub, 1)
			writeValFlat(t, filepath.Join(root, "val"), root, sub, 1)
		}},
		{"train and val folders, val in synset folders", func(t *testing.T, root string) {
			writeImageNetFolder(t, filepath.Join(root, "train"), sub, 1)
			writeValSynsets(t, filepath.Join(root, "val"), sub, 1)
		}},
		{"the train tar and a val folder", func(t *testing.T, root string) {
			writeOuterTar(t, filepath.Join(root, trainTar), sub, 1)
			writeValFlat(t, filepath.Join(root, "val"), filepath.Join(root, "val"), sub, 1)
		}},
		{"per-class train tars and a val folder", func(t *testing.T, root string) {
			writeImageNetTars(t, filepath.Join(root, "train"), sub, 1)
			writeValSynsets(t, filepath.Join(root, "val"), sub, 1)
		}},
		{"Kaggle's layout", func(t *testing.T, root string) {
			cls := filepath.Join(root, "ILSVRC", "Data", "CLS-LOC")
			writeImageNetFolder(t, filepath.Join(cls, "train"), sub, 1)
			writeValFlat(t, filepath.Join(cls, "val"), root, sub, 1)
		}},
	}
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			root := t.TempDir()
			l.setup(t, root)
			train := mustPlan(t, Spec{Dataset: ImageNet100, Input: root, Split: "train"})
			val := mustPlan(t, Spec{Dataset: ImageNet100, Input: root, Split: "val"})
			if train.Input == root || val.Input == root || train.Input == val.Input {
				t.Errorf("train read from %s, val from %s", train.Input, val.Input)
			}
			trainFiles, valFiles := splitSources(t, train), splitSources(t, val)
			if len(trainFiles) != 100 || len(valFiles) != 100 {
				t.Fatalf("%d train and %d val records, want 100 each", len(trainFiles), len(valFiles))
			}
			for _, f := range trainFiles {
				if strings.Contains(f, "ILSVRC2012_val_") {
					t.Fatalf("the train split read %s", f)
				}
			}
			for _, f := range valFiles {
				if !strings.HasPrefix(f, "ILSVRC2012_val_") {
					t.Fatalf("the val split read %s", f)
				}
			}
			r := readPlan(t, val)
			for i, rec := range r.recs {
				if rec.Label != i || !strings.HasPrefix(rec.Key, "val/") {
					t.Fatalf("val record %d: %s label %d", i, rec.Key, rec.Label)
				}
			}
			if a, b, ok := SharedSource(val.Sources(), train.Sources()); ok {
				t.Errorf("val source %s overlaps train source %s", a, b)
			}
		})
	}
}

// TestSplitReadingAnotherSplitIsRefused: an input that is one split's own (by its name, or
// by a layout only that split has) is refused for another split, in one line naming both;
// a root lacking the split's place says which places it holds.
func TestSplitReadingAnotherSplitIsRefused(t *testing.T) {
	sub := ImageNet100Synsets()
	root := t.TempDir()
	writeImageNetFolder(t, filepath.Join(root, "train"), sub, 1)
	writeValFlat(t, filepath.Join(root, "val"), filepath.Join(root, "val"), sub, 1)
	outer := writeOuterTar(t, filepath.Join(t.TempDir(), trainTar), sub, 1)
	tars := writeImageNetTars(t, filepath.Join(t.TempDir(), "in100-tars"), sub, 1)
	trainOnlyRoot := t.TempDir()
	writeImageNetFolder(t, filepath.Join(trainOnlyRoot, "train"), sub, 1)
	folders := t.TempDir()
	writeFolder(t, folders, map[string][]byte{"train/cat/a.jpg": testfiles.JPEG(t, 3, 3, 1), "val/cat/b.jpg": testfiles.JPEG(t, 3, 3, 2)})

	tests := []struct {
		name string
		give Spec
		want []string
	}{
		{"imagenet val of the train folder", Spec{Dataset: ImageNet, Input: filepath.Join(root, "train"), Split: "val"},
			[]string{"imagenet val: " + filepath.Join(root, "train") + " is the train split's (train)", "must not read"}},
		{"imagenet train of the val folder", Spec{Dataset: ImageNet100, Input: filepath.Join(root, "val"), Split: "train"},
			[]string{"imagenet100 train:", "is the val split's (val)"}},
		{"imagenet val of the train tar", Spec{Dataset: ImageNet100, Input: outer, Split: "val"},
			[]string{"imagenet100 val: " + outer + " is the train split's (" + trainTar + ")"}},
		{"imagenet val of per-class tars", Spec{Dataset: ImageNet100, Input: tars, Split: "val"},
			[]string{"imagenet100 val:", "a folder of per-class tars, the train split's layout"}},
		{"imagenet val of a glob of tars", Spec{Dataset: ImageNet100, Input: filepath.Join(tars, "n*.tar"), Split: "val"},
			[]string{"a glob of per-class tars, the train split's layout"}},
		{"imagenet root without val", Spec{Dataset: ImageNet100, Input: trainOnlyRoot, Split: "val"},
			[]string{"the dataset root " + trainOnlyRoot + " holds train (train) but no val split (val or ILSVRC/Data/CLS-LOC/val)"}},
		{"folder test of a root without test", Spec{Dataset: Folder, Input: folders, Split: "test"},
			[]string{"folder test: the dataset root", "holds train (train), val (val) but no test split (test)"}},
		{"folder banana of a root", Spec{Dataset: Folder, Input: folders, Split: "banana"},
			[]string{"no banana split"}},
		{"folder test of the train folder", Spec{Dataset: Folder, Input: filepath.Join(folders, "train"), Split: "test"},
			[]string{"folder test: " + filepath.Join(folders, "train") + " is the train split's (train)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := planErr(t, tt.give)
			t.Log(err)
			wantErrorMentions(t, err, tt.want...)
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("the error is not one line: %q", err)
			}
		})
	}
}

// TestFolderSplits: an image folder's root with train/, val/ and test/ gives each split its
// own subfolder (on disk and on gs://, trailing slash or not); a folder of class folders
// under a name of its own is read as the split asked for; explicit per-split folders work.
func TestFolderSplits(t *testing.T) {
	root := t.TempDir()
	files := map[string][]byte{}
	for i, split := range []string{"train", "val", "test"} {
		for j, class := range []string{"cat", "dog"} {
			files[fmt.Sprintf("%s/%s/%s-%d.jpg", split, class, split, j)] = testfiles.JPEG(t, 3, 3, 10*i+j)
		}
	}
	writeFolder(t, root, files)
	bucket := gcstest.Start(t, "folder-splits")
	upload(t, root, bucket+"/photos")
	for _, in := range []string{root, root + "/", bucket + "/photos", bucket + "/photos/"} {
		for _, split := range []string{"train", "val", "test"} {
			p := mustPlan(t, Spec{Dataset: Folder, Input: in, Split: split})
			r := readPlan(t, p)
			var got []string
			for _, rec := range r.recs {
				got = append(got, rec.Key)
			}
			want := []string{split + "/cat/" + split + "-0.jpg", split + "/dog/" + split + "-1.jpg"}
			if !slices.Equal(got, want) || !slices.Equal(p.Classes, []string{"cat", "dog"}) {
				t.Errorf("%s %s: keys %q, classes %q; want %q", in, split, got, p.Classes, want)
			}
			if !strings.HasSuffix(strings.TrimSuffix(p.Input, "/"), split) {
				t.Errorf("%s %s: read from %s", in, split, p.Input)
			}
		}
	}
	// A split's own folder is that split; its sources are its class folders.
	p := mustPlan(t, Spec{Dataset: Folder, Input: filepath.Join(root, "test"), Split: "test"})
	if want := []string{filepath.Join(root, "test", "cat"), filepath.Join(root, "test", "dog")}; !slices.Equal(p.Sources(), want) {
		t.Errorf("sources %q, want %q", p.Sources(), want)
	}
	// A folder of class folders under a name of its own is the split asked for.
	own := filepath.Join(t.TempDir(), "photos")
	writeFolder(t, own, map[string][]byte{"cat/a.jpg": testfiles.JPEG(t, 3, 3, 1)})
	if p := mustPlan(t, Spec{Dataset: Folder, Input: own, Split: "holdout"}); p.Input != own || p.Records != 1 {
		t.Errorf("read %d records from %s", p.Records, p.Input)
	}
}

// TestHiddenFoldersAreNotClasses: .ipynb_checkpoints (and any hidden folder or file) is not a
// class and shifts no label; it is counted among the ignored files.
func TestHiddenFoldersAreNotClasses(t *testing.T) {
	dir := t.TempDir()
	writeFolder(t, dir, map[string][]byte{
		".ipynb_checkpoints/a-checkpoint.jpg": testfiles.JPEG(t, 3, 3, 1),
		"cat/.hidden/x.jpg":                   testfiles.JPEG(t, 3, 3, 2),
		"cat/a.jpg":                           testfiles.JPEG(t, 3, 3, 3),
		"dog/b.jpg":                           testfiles.JPEG(t, 3, 3, 4),
	})
	if err := os.Mkdir(filepath.Join(dir, ".empty-hidden"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := mustPlan(t, Spec{Dataset: Folder, Input: dir})
	if !slices.Equal(p.Classes, []string{"cat", "dog"}) || p.Ignored != 2 {
		t.Fatalf("classes %q, %d ignored (%q)", p.Classes, p.Ignored, p.IgnoredExamples)
	}
	r := readPlan(t, p)
	if len(r.recs) != 2 || r.recs[0].Label != 0 || r.recs[1].Label != 1 {
		t.Errorf("records %v", r.recs)
	}
}

// TestLinksDoNotFanOut: a folder of links back to itself would be listed ten times per level;
// a link to a folder already listed is refused at once, naming both.
func TestLinksDoNotFanOut(t *testing.T) {
	dir := t.TempDir()
	writeFolder(t, dir, map[string][]byte{"a/x.jpg": testfiles.JPEG(t, 3, 3, 1)})
	for i := range 10 {
		if err := os.Symlink(dir, filepath.Join(dir, "a", fmt.Sprintf("up%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	wantErrorMentions(t, planErr(t, Spec{Dataset: Folder, Input: dir}), "leads to", "already listed as "+dir)
}

// TestFIFOInputsDoNotHang: a named pipe, or a link to one, among the images is not read (it
// would block until something wrote to it); as the input itself it is refused.
func TestFIFOInputsDoNotHang(t *testing.T) {
	dir := t.TempDir()
	writeFolder(t, dir, map[string][]byte{"a/x.jpg": testfiles.JPEG(t, 3, 3, 1)})
	fifo := filepath.Join(t.TempDir(), "train.tar")
	if err := mkfifo(fifo); err != nil {
		t.Skip("no named pipes here:", err)
	}
	if err := os.Symlink(fifo, filepath.Join(dir, "a", "link.jpg")); err != nil {
		t.Fatal(err)
	}
	if err := mkfifo(filepath.Join(dir, "a", "pipe.png")); err != nil {
		t.Fatal(err)
	}
	r := readPlan(t, mustPlan(t, Spec{Dataset: Folder, Input: dir}))
	if len(r.recs) != 1 {
		t.Errorf("%d records, want 1", len(r.recs))
	}
	_, err := storage.ReadFile(t.Context(), fifo)
	wantErrorMentions(t, err, fifo, "not a regular file")
	wantErrorMentions(t, planErr(t, Spec{Dataset: ImageNet, Input: fifo}), fifo, "not a regular file")
}
