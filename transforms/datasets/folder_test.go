package datasets

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/internal/testing/gcstest"
	"github.com/dcl-beam/dcl-beam/internal/testing/testfiles"
)

// writeFolder writes an image folder: files maps relative paths to contents.
func writeFolder(t testing.TB, dir string, files map[string][]byte) {
	t.Helper()
	for rel, data := range files {
		testfiles.WriteFile(t, filepath.Join(dir, filepath.FromSlash(rel)), data)
	}
}

func TestFolder(t *testing.T) {
	dir := t.TempDir()
	writeFolder(t, dir, map[string][]byte{
		"dog/b.JPG":        testfiles.JPEG(t, 8, 6, 1),
		"dog/a.png":        testfiles.PNG(t, 5, 5, 2),
		"dog/nested/c.jpg": testfiles.JPEG(t, 4, 4, 3), // torchvision's ImageFolder walks class folders
		"dog/notes.txt":    []byte("not an image"),
		"cat/x.jpeg":       testfiles.JPEG(t, 3, 3, 4),
		"cat/.DS_Store":    {0},
		"README.md":        []byte("# my dataset"),
	})
	p := mustPlan(t, Spec{Dataset: Folder, Input: dir, Split: "val"})
	if want := []string{"cat", "dog"}; !slices.Equal(p.Classes, want) {
		t.Fatalf("classes %q, want %q", p.Classes, want)
	}
	if p.Ignored != 3 || !slices.Equal(p.IgnoredExamples, []string{"README.md", "cat/.DS_Store", "dog/notes.txt"}) {
		t.Errorf("ignored %d: %q", p.Ignored, p.IgnoredExamples)
	}
	r := readPlan(t, p)
	want := []struct {
		key    string
		label  int
		format string
		w, h   int
	}{
		{"val/cat/x.jpeg", 0, FormatJPEG, 3, 3},
		{"val/dog/a.png", 1, FormatPNG, 5, 5},
		{"val/dog/b.JPG", 1, FormatJPEG, 8, 6},
		{"val/dog/nested/c.jpg", 1, FormatJPEG, 4, 4},
	}
	if len(r.recs) != len(want) || len(r.bads) != 0 {
		t.Fatalf("%d records, %d bad; want %d", len(r.recs), len(r.bads), len(want))
	}
	for i, w := range want {
		rec := r.recs[i]
		if rec.Key != w.key || rec.Label != w.label || rec.Format != w.format || rec.Width != w.w || rec.Height != w.h || rec.Index != int64(i) {
			t.Errorf("record %d: %s label %d %s %dx%d index %d; want %+v", i, rec.Key, rec.Label, rec.Format, rec.Width, rec.Height, rec.Index, w)
		}
		if rec.Source != filepath.Join(dir, filepath.FromSlash(w.key[len("val/"):])) {
			t.Errorf("record %d: source %s", i, rec.Source)
		}
		m, err := rec.Image(Limits{})
		if err != nil || m.W != w.w || m.H != w.h {
			t.Errorf("record %d: decoded %dx%d, %v", i, m.W, m.H, err)
		}
	}
}

// TestFolderFollowsLinks: ImageNet-100 is often a folder of links to ImageNet's class folders.
func TestFolderFollowsLinks(t *testing.T) {
	real, linked := t.TempDir(), t.TempDir()
	writeFolder(t, real, map[string][]byte{"n01/a.jpg": testfiles.JPEG(t, 4, 4, 1), "n02/b.jpg": testfiles.JPEG(t, 4, 4, 2)})
	if err := os.Symlink(filepath.Join(real, "n02"), filepath.Join(linked, "n02")); err != nil {
		t.Fatal(err)
	}
	testfiles.WriteFile(t, filepath.Join(linked, "n03", "c.png"), testfiles.PNG(t, 2, 2, 1))
	if err := os.Symlink(filepath.Join(real, "n01", "a.jpg"), filepath.Join(linked, "n03", "linked.jpg")); err != nil {
		t.Fatal(err)
	}
	r := readPlan(t, mustPlan(t, Spec{Dataset: Folder, Input: linked}))
	var keys []string
	for _, rec := range r.recs {
		keys = append(keys, rec.Key)
	}
	if want := []string{"train/n02/b.jpg", "train/n03/c.png", "train/n03/linked.jpg"}; !slices.Equal(keys, want) {
		t.Errorf("keys %q, want %q", keys, want)
	}
}

// TestFolderEmptyClassKeepsItsLabel: labels are the sorted class folder names, whether a
// folder holds images or not (empty, only other files, or on gs:// a folder placeholder), so a
// class absent from one split keeps its label there, with a warning naming it.
func TestFolderEmptyClassKeepsItsLabel(t *testing.T) {
	train, test := t.TempDir(), t.TempDir()
	writeFolder(t, train, map[string][]byte{
		"a/1.jpg": testfiles.JPEG(t, 2, 2, 1), "b/2.jpg": testfiles.JPEG(t, 2, 2, 2), "c/3.jpg": testfiles.JPEG(t, 2, 2, 3),
	})
	writeFolder(t, test, map[string][]byte{"b/readme.txt": []byte("no images"), "c/4.jpg": testfiles.JPEG(t, 2, 2, 4)})
	if err := os.Mkdir(filepath.Join(test, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	bucket := gcstest.Start(t, "classes")
	remote := bucket + "/held-out"
	upload(t, test, remote)
	if err := storage.WriteFile(t.Context(), remote+"/a/", nil); err != nil { // a console's empty folder
		t.Fatal(err)
	}
	want := []string{"a", "b", "c"}
	for _, in := range []string{train, test, remote} {
		p := mustPlan(t, Spec{Dataset: Folder, Input: in})
		if !slices.Equal(p.Classes, want) {
			t.Errorf("%s: classes %q, want %q", in, p.Classes, want)
		}
		r := readPlan(t, p)
		for _, rec := range r.recs {
			if wantLabel := int(rec.Key[len("train/")] - 'a'); rec.Label != wantLabel {
				t.Errorf("%s: %s has label %d, want %d", in, rec.Key, rec.Label, wantLabel)
			}
		}
		if in == train {
			continue
		}
		if len(r.recs) != 1 || len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0], "keep their labels with no records: a, b") {
			t.Errorf("%s: %d records, warnings %q; want 1 and a warning naming a and b", in, len(r.recs), p.Warnings)
		}
	}
}

func TestFolderBadInput(t *testing.T) {
	tests := []struct {
		name    string
		files   map[string][]byte
		input   string // relative to the temporary folder; "" is the folder
		planErr []string
		// or Read reports these bad records, by key and reason, after wantGood good ones
		wantBad  map[string]string
		wantGood int
	}{
		{name: "empty folder", files: nil, planErr: []string{"holds no files"}},
		{name: "missing folder", input: "nope", planErr: []string{"nope", "does not exist"}},
		{name: "no class folders", files: map[string][]byte{"a.jpg": testfiles.JPEG(t, 2, 2, 1)},
			planErr: []string{"has no class folders"}},
		{name: "corrupt and absurd images", files: map[string][]byte{
			"a/good.jpg":     testfiles.JPEG(t, 4, 4, 1),
			"a/garbage.jpg":  []byte("this is text, not a JPEG"),
			"a/empty.png":    {},
			"a/huge.jpg":     hugeJPEG(t),
			"b/huge.png":     hugePNG(),
			"b/passes.png":   pngHeaderInterlaced(5000, 5000, 16, 6, 1),
			"b/truncated.jp": nil, // not an image name: ignored
			"b/ok.png":       testfiles.PNG(t, 3, 3, 1),
		}, wantGood: 2, wantBad: map[string]string{
			"train/a/garbage.jpg": "not a jpeg image: starts with 74 68 69 73",
			"train/a/empty.png":   "empty file",
			"train/a/huge.jpg":    "65535x65535 = 4294836225 pixels, more than the limit",
			"train/b/huge.png":    "100000x100000 = 10000000000 pixels, more than the limit",
			"train/b/passes.png":  "5000x5000 pixels of 16 bytes each to decode (interlaced: its passes decoded apart, then merged), 381 MiB, more than the limit of 256 MiB",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFolder(t, dir, tt.files)
			s := Spec{Dataset: Folder, Input: filepath.Join(dir, tt.input)}
			if tt.planErr != nil {
				err := planErr(t, s)
				t.Log(err)
				wantErrorMentions(t, err, tt.planErr...)
				return
			}
			r := readPlan(t, mustPlan(t, s))
			if len(r.recs) != tt.wantGood || len(r.bads) != len(tt.wantBad) {
				t.Fatalf("%d records and %d bad (%v); want %d and %d", len(r.recs), len(r.bads), r.bads, tt.wantGood, len(tt.wantBad))
			}
			for _, b := range r.bads {
				t.Log(b)
				want, ok := tt.wantBad[b.Key]
				if !ok || !contains(b.Reason, want) || b.Source != filepath.Join(dir, filepath.FromSlash(b.Key[len("train/"):])) {
					t.Errorf("bad record %s: want reason %q", b, want)
				}
			}
		})
	}
}

// TestCorruptJPEGIsADeadLetter: an image whose header is fine but whose data is not passes
// Read, fails to decode, and Bad turns it into a dead letter naming the file; the read goes on.
func TestCorruptJPEGIsADeadLetter(t *testing.T) {
	dir := t.TempDir()
	writeFolder(t, dir, map[string][]byte{"a/1.jpg": testfiles.JPEG(t, 4, 4, 1), "a/2.jpg": testfiles.CorruptJPEG(t), "a/3.jpg": testfiles.JPEG(t, 4, 4, 2)})
	r := readPlan(t, mustPlan(t, Spec{Dataset: Folder, Input: dir}))
	var decoded int
	var dead []BadRecord
	for _, rec := range r.recs {
		if _, err := rec.Image(Limits{}); err != nil {
			dead = append(dead, rec.Bad(err))
			continue
		}
		decoded++
	}
	if decoded != 2 || len(dead) != 1 {
		t.Fatalf("decoded %d, dead letters %v; want 2 and 1", decoded, dead)
	}
	d := dead[0]
	if d.Key != "train/a/2.jpg" || d.Source != filepath.Join(dir, "a", "2.jpg") || !contains(d.Reason, "decoding 24x24 jpeg") {
		t.Errorf("dead letter %+v", d)
	}
}

func TestFolderChangedSincePlanning(t *testing.T) {
	dir := t.TempDir()
	writeFolder(t, dir, map[string][]byte{"a/1.jpg": testfiles.JPEG(t, 4, 4, 1), "a/2.jpg": testfiles.JPEG(t, 4, 4, 2)})
	p := mustPlan(t, Spec{Dataset: Folder, Input: dir})
	os.Remove(filepath.Join(dir, "a", "1.jpg"))
	_, err := Read(t.Context(), p.Units[0], func(Record) error { return nil }, func(BadRecord) error { return nil })
	wantErrorMentions(t, err, filepath.Join(dir, "a"), "holds 1 image files, 2 when planned")
}

func TestMaxFileBytes(t *testing.T) {
	dir := t.TempDir()
	big := testfiles.JPEG(t, 64, 64, 1)
	writeFolder(t, dir, map[string][]byte{"a/big.jpg": big, "a/small.jpg": testfiles.JPEG(t, 2, 2, 1)})
	r := readPlan(t, mustPlan(t, Spec{Dataset: Folder, Input: dir, MaxFileBytes: int64(len(big) - 1)}))
	if len(r.recs) != 1 || len(r.bads) != 1 || !contains(r.bads[0].Reason, "larger than the limit") {
		t.Errorf("records %d, bad %v", len(r.recs), r.bads)
	}
}

// File and folder names are bytes on Linux, keys and class names UTF-8 strings (Parquet, JSON):
// a name is written as its rawname.Text (each byte that is not UTF-8 as \xHH, a literal \xHH's
// backslash as \x5c), so that keys and classes stay distinct (a Latin-1 é and the four
// characters \xe9 are two classes) and say which file they came from, and the file is still read.
func TestFolderNamesThatAreNotUTF8(t *testing.T) {
	dir := t.TempDir()
	writeFolder(t, dir, map[string][]byte{
		"caf\xe9/a\xff.png": testfiles.PNG(t, 4, 4, 1),
		"caf\xe9/a\xfe.png": testfiles.PNG(t, 4, 4, 2),
		"dog/b.png":         testfiles.PNG(t, 4, 4, 3),
		`caf\xe9/c.png`:     testfiles.PNG(t, 4, 4, 4),
	})
	p := mustPlan(t, Spec{Dataset: Folder, Input: dir, Split: "val"})
	if want := []string{`caf\x5cxe9`, `caf\xe9`, "dog"}; !slices.Equal(p.Classes, want) {
		t.Errorf("classes %q, want %q", p.Classes, want)
	}
	r := readPlan(t, p)
	var keys []string
	for _, rec := range r.recs {
		keys = append(keys, rec.Key)
		if !utf8.ValidString(rec.Key) {
			t.Errorf("key %q is not UTF-8", rec.Key)
		}
	}
	if want := []string{`val/caf\x5cxe9/c.png`, `val/caf\xe9/a\xfe.png`, `val/caf\xe9/a\xff.png`, "val/dog/b.png"}; !slices.Equal(keys, want) || len(r.bads) != 0 {
		t.Errorf("keys %q (%d bad records), want %q", keys, len(r.bads), want)
	}
}
