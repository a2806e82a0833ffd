package datasets

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/testing/testfiles"
)

func TestImageNetClassLists(t *testing.T) {
	all, sub := ImageNetSynsets(), ImageNet100Synsets()
	if len(all) != 1000 || all[0] != "n01440764" || all[999] != "n15075141" || !slices.IsSorted(all) {
		t.Errorf("ImageNet synsets: %d, first %s, last %s, sorted %v", len(all), all[0], all[len(all)-1], slices.IsSorted(all))
	}
	if len(slices.Compact(slices.Clone(all))) != 1000 {
		t.Error("ImageNet synsets repeat")
	}
	if len(sub) != 100 || sub[0] != "n01558993" || sub[99] != "n13040303" || !slices.IsSorted(sub) || len(slices.Compact(slices.Clone(sub))) != 100 {
		t.Errorf("ImageNet-100: %d synsets, first %s, last %s", len(sub), sub[0], sub[len(sub)-1])
	}
	for _, s := range append(slices.Clone(all), sub...) {
		if !synsetPattern.MatchString(s) {
			t.Errorf("%q is not a synset", s)
		}
		if _, ok := slices.BinarySearch(all, s); !ok {
			t.Errorf("ImageNet-100 synset %s is not an ILSVRC-2012 class", s)
		}
	}
	for _, d := range []string{CIFAR10, CIFAR100, STL10, MNIST, FashionMNIST, ImageNet, ImageNet100} {
		names, err := ClassNames(d, false)
		if err != nil || len(names) < 10 || len(slices.Compact(slices.Clone(names))) != len(names) {
			t.Errorf("%s: %d class names, %v", d, len(names), err)
		}
	}
	if c, _ := ClassNames(CIFAR100, true); len(c) != 20 {
		t.Errorf("CIFAR-100 coarse: %d names", len(c))
	}
	if c, _ := ClassNames(CIFAR100, false); len(c) != 100 || !slices.IsSorted(c) {
		t.Errorf("CIFAR-100 fine: %d names (the archive lists them sorted)", len(c))
	}
}

// imagenetImage is the fixture image i of a synset.
func imagenetImage(t testing.TB, synset string, i int) (name string, data []byte) {
	var seed int
	fmt.Sscanf(synset[1:], "%d", &seed)
	return fmt.Sprintf("%s_%d.JPEG", synset, i), testfiles.JPEG(t, 4+i, 3, seed+i)
}

// imagenetTars returns a per-class tar of per images for each synset.
func imagenetTars(t testing.TB, synsets []string, per int) []testfiles.TarMember {
	var out []testfiles.TarMember
	for _, s := range synsets {
		var entries []testfiles.TarMember
		for i := range per {
			name, data := imagenetImage(t, s, i)
			entries = append(entries, testfiles.TarMember{Name: name, Data: data})
		}
		out = append(out, testfiles.TarMember{Name: s + ".tar", Data: testfiles.Tar(t, entries)})
	}
	return out
}

// Writers of the train layouts, all holding the same images: a folder of synset folders
// (with a stray file at the top), a folder of per-class tars, and an outer tar of those tars.
func writeImageNetFolder(t testing.TB, dir string, synsets []string, per int) string {
	for _, s := range synsets {
		for i := range per {
			name, data := imagenetImage(t, s, i)
			testfiles.WriteFile(t, filepath.Join(dir, s, name), data)
		}
	}
	testfiles.WriteFile(t, filepath.Join(dir, "LOC_synset_mapping.txt"), []byte("not data"))
	return dir
}

func writeImageNetTars(t testing.TB, dir string, synsets []string, per int) string {
	for _, e := range imagenetTars(t, synsets, per) {
		testfiles.WriteFile(t, filepath.Join(dir, e.Name), e.Data)
	}
	return dir
}

func writeOuterTar(t testing.TB, p string, synsets []string, per int) string {
	testfiles.WriteFile(t, p, testfiles.Tar(t, imagenetTars(t, synsets, per)))
	return p
}

// TestImageNetLayoutsAgree: the folder, the per-class tars, a glob of them and the outer tar
// give the same records (keys, labels, bytes), so augmentations are the same whichever the
// input; ImageNet-100 reads only its classes from full inputs.
func TestImageNetLayoutsAgree(t *testing.T) {
	sub := ImageNet100Synsets()
	synsets := append(slices.Clone(sub), "n01440764", "n15075141") // two classes outside ImageNet-100
	slices.Sort(synsets)
	root := t.TempDir()
	folder := writeImageNetFolder(t, filepath.Join(root, "train"), synsets, 2)
	tars := writeImageNetTars(t, filepath.Join(root, "tars"), synsets, 2)
	outer := writeOuterTar(t, filepath.Join(root, "ILSVRC2012_img_train.tar"), synsets, 2)
	var want []string
	for label, s := range sub {
		for i := range 2 {
			name, data := imagenetImage(t, s, i)
			want = append(want, fmt.Sprintf("train/%s/%s|%d|%x", s, name, label, sha256.Sum256(data)))
		}
	}
	for _, input := range []string{folder, tars, filepath.Join(tars, "n*.tar"), outer} {
		t.Run(filepath.Base(input), func(t *testing.T) {
			p := mustPlan(t, Spec{Dataset: ImageNet100, Input: input, UnitRecords: 3})
			if !slices.Equal(p.Classes, sub) {
				t.Fatalf("classes differ from ImageNet100Synsets")
			}
			r := readPlan(t, p)
			var got []string
			for i, rec := range r.recs {
				got = append(got, fmt.Sprintf("%s|%d|%x", rec.Key, rec.Label, sha256.Sum256(rec.Encoded)))
				if i > 0 && rec.Index <= r.recs[i-1].Index {
					t.Errorf("record %s: index %d after %d", rec.Key, rec.Index, r.recs[i-1].Index)
				}
			}
			if !slices.Equal(got, want) || len(r.bads) != 0 {
				t.Errorf("%d records, %d bad; differ from the expected %d", len(got), len(r.bads), len(want))
			}
			isTar := input != folder
			if p.Exact == isTar || (isTar && r.recs[0].Member == "") {
				t.Errorf("exact %v, member %q", p.Exact, r.recs[0].Member)
			}
			if input == outer {
				m := r.recs[0].Member
				if m != sub[0]+".tar/"+sub[0]+"_0.JPEG" || r.recs[0].Source != outer {
					t.Errorf("member %q source %s", m, r.recs[0].Source)
				}
				// The offset points at the member's bytes inside the outer tar.
				data, _ := os.ReadFile(outer)
				rec := r.recs[0]
				if string(data[rec.Offset:rec.Offset+int64(len(rec.Encoded))]) != string(rec.Encoded) {
					t.Errorf("offset %d does not point at the member's data", rec.Offset)
				}
			}
		})
	}
}

// TestImageNetFull: all 1,000 classes (from the outer tar: one file to write), labelled by
// sorted synset.
func TestImageNetFull(t *testing.T) {
	all := ImageNetSynsets()
	outer := writeOuterTar(t, filepath.Join(t.TempDir(), "ILSVRC2012_img_train.tar"), all, 1)
	p := mustPlan(t, Spec{Dataset: ImageNet, Input: outer})
	r := readPlan(t, p)
	if len(r.recs) != 1000 || p.Exact || p.Records != 1000 {
		t.Fatalf("%d records; plan estimates %d (exact %v)", len(r.recs), p.Records, p.Exact)
	}
	for i, rec := range r.recs {
		if rec.Label != i || !strings.HasPrefix(rec.Key, "train/"+all[i]+"/") {
			t.Fatalf("record %d: %s label %d", i, rec.Key, rec.Label)
		}
	}
}

func TestImageNetBadInput(t *testing.T) {
	sub := ImageNet100Synsets()
	folder := func(t *testing.T, dir string) string {
		return writeImageNetFolder(t, filepath.Join(dir, "train"), sub, 1)
	}
	tars := func(t *testing.T, dir string) string { return writeImageNetTars(t, filepath.Join(dir, "tars"), sub, 1) }
	jpg := testfiles.JPEG(t, 3, 3, 1)
	tests := []struct {
		name    string
		setup   func(t *testing.T, dir string) string // returns the input
		planErr []string
		readErr []string          // or the read fails so
		bad     map[string]string // or these bad records, key -> reason
		ignored int64
	}{
		{name: "folder not a synset", setup: func(t *testing.T, dir string) string {
			f := folder(t, dir)
			testfiles.WriteFile(t, filepath.Join(f, "cats", "a.jpg"), jpg)
			return f
		}, planErr: []string{"folders that are not ILSVRC-2012 synsets: cats"}},
		{name: "missing synset folders", setup: func(t *testing.T, dir string) string {
			f := folder(t, dir)
			os.RemoveAll(filepath.Join(f, sub[3]))
			os.RemoveAll(filepath.Join(f, sub[50]))
			return f
		}, planErr: []string{"lacks 2 of the 100 classes", sub[3], sub[50]}},
		{name: "missing tar", setup: func(t *testing.T, dir string) string {
			tars := tars(t, dir)
			os.Remove(filepath.Join(tars, sub[7]+".tar"))
			return tars
		}, planErr: []string{"lacks 1 of the 100 classes: " + sub[7]}},
		{name: "tar not a synset", setup: func(t *testing.T, dir string) string {
			tars := tars(t, dir)
			testfiles.WriteFile(t, filepath.Join(tars, "extra.tar"), testfiles.Tar(t, nil))
			return tars
		}, planErr: []string{"not named after an ILSVRC-2012 synset: extra.tar"}},
		{name: "mixed layouts", setup: func(t *testing.T, dir string) string {
			f := folder(t, dir)
			testfiles.WriteFile(t, filepath.Join(f, sub[0]+".tar"), testfiles.Tar(t, nil))
			return f
		}, planErr: []string{"mixes 100 class folders, 1 .tar files"}},
		{name: "glob of nothing", setup: func(t *testing.T, dir string) string {
			return filepath.Join(dir, "n*.tar")
		}, planErr: []string{"matches no files"}},
		{name: "entry escaping the tar", setup: func(t *testing.T, dir string) string {
			tars := tars(t, dir)
			testfiles.WriteFile(t, filepath.Join(tars, sub[1]+".tar"), testfiles.Tar(t, []testfiles.TarMember{{Name: "ok.JPEG", Data: jpg}, {Name: "../../etc/x.JPEG", Data: jpg}}))
			return tars
		}, readErr: []string{sub[1] + ".tar", `entry "../../etc/x.JPEG" escapes the archive`}},
		{name: "absolute entry", setup: func(t *testing.T, dir string) string {
			tars := tars(t, dir)
			testfiles.WriteFile(t, filepath.Join(tars, sub[1]+".tar"), testfiles.Tar(t, []testfiles.TarMember{{Name: "/abs/x.JPEG", Data: jpg}}))
			return tars
		}, readErr: []string{sub[1] + ".tar", `entry "/abs/x.JPEG" has an absolute path`}},
		{name: "outer tar entry escaping", setup: func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "outer.tar")
			testfiles.WriteFile(t, p, testfiles.Tar(t, []testfiles.TarMember{{Name: "../" + sub[0] + ".tar", Data: testfiles.Tar(t, nil)}}))
			return p
		}, planErr: []string{"outer.tar", `entry "../` + sub[0] + `.tar" escapes the archive`}},
		{name: "truncated tar", setup: func(t *testing.T, dir string) string {
			tars := tars(t, dir)
			b := testfiles.JPEG(t, 40, 40, 2)
			data := testfiles.Tar(t, []testfiles.TarMember{{Name: "a.JPEG", Data: jpg}, {Name: "b.JPEG", Data: b}})
			cut := bytes.Index(data, b) + len(b)/2 // in the middle of b.JPEG's data
			testfiles.WriteFile(t, filepath.Join(tars, sub[2]+".tar"), data[:cut])
			return tars
		}, readErr: []string{sub[2] + ".tar", `reading "b.JPEG"`, "unexpected EOF"}},
		{name: "corrupt members", setup: func(t *testing.T, dir string) string {
			tars := tars(t, dir)
			testfiles.WriteFile(t, filepath.Join(tars, sub[4]+".tar"), testfiles.Tar(t, []testfiles.TarMember{
				{Name: "garbage.JPEG", Data: []byte("GIF89a")},
				{Name: "link.JPEG", Type: tar.TypeSymlink},
				{Name: "README", Data: []byte("hi")},
				{Name: "sub/", Type: tar.TypeDir},
				{Name: "sub/fine.JPEG", Data: jpg},
			}))
			return tars
		}, bad: map[string]string{
			"train/" + sub[4] + "/garbage.JPEG": "not a jpeg image: starts with 47 49 46 38 39 61",
			"train/" + sub[4] + "/link.JPEG":    "not a regular file",
		}, ignored: 1},
		{name: "a member name twice", setup: func(t *testing.T, dir string) string {
			tars := tars(t, dir)
			testfiles.WriteFile(t, filepath.Join(tars, sub[5]+".tar"), testfiles.Tar(t, []testfiles.TarMember{
				{Name: "a.JPEG", Data: jpg}, {Name: "b.JPEG", Data: jpg}, {Name: "./a.JPEG", Data: jpg},
			}))
			return tars
		}, bad: map[string]string{
			"train/" + sub[5] + "/a.JPEG": `a second member named "a.JPEG"`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := Spec{Dataset: ImageNet100, Input: tt.setup(t, t.TempDir())}
			if tt.planErr != nil {
				err := planErr(t, s)
				t.Log(err)
				wantErrorMentions(t, err, tt.planErr...)
				return
			}
			p := mustPlan(t, s)
			var bads []BadRecord
			var readErr error
			var ignored int64
			for _, u := range p.Units {
				st, err := Read(t.Context(), u, func(Record) error { return nil }, func(b BadRecord) error { bads = append(bads, b); return nil })
				ignored += st.Ignored
				if err != nil {
					readErr = err
				}
			}
			if tt.readErr != nil {
				t.Log(readErr)
				wantErrorMentions(t, readErr, tt.readErr...)
				return
			}
			if readErr != nil {
				t.Fatal(readErr)
			}
			if len(bads) != len(tt.bad) || ignored != tt.ignored {
				t.Fatalf("bad records %v, ignored %d; want %d and %d", bads, ignored, len(tt.bad), tt.ignored)
			}
			for _, b := range bads {
				t.Log(b)
				if want, ok := tt.bad[b.Key]; !ok || !contains(b.Reason, want) || b.Position.Member == "" {
					t.Errorf("bad record %s: want reason %q", b, want)
				}
			}
		})
	}
}

func TestImageNetVal(t *testing.T) {
	all, sub := ImageNetSynsets(), ImageNet100Synsets()
	root := t.TempDir()
	val := filepath.Join(root, "val")
	// Three images of ImageNet-100 classes, one of another class, one with no label.
	classes := []string{sub[0], sub[99], "n01440764", sub[5]}
	var csv strings.Builder
	csv.WriteString("ImageId,PredictionString\n")
	for i, c := range classes {
		name := fmt.Sprintf("ILSVRC2012_val_%08d", i+1)
		testfiles.WriteFile(t, filepath.Join(val, name+".JPEG"), testfiles.JPEG(t, 5, 5, i))
		fmt.Fprintf(&csv, "%s,%s 1 2 3 4 %s 5 6 7 8\n", name, c, c)
	}
	testfiles.WriteFile(t, filepath.Join(val, "ILSVRC2012_val_00000009.JPEG"), testfiles.JPEG(t, 5, 5, 9))
	testfiles.WriteFile(t, filepath.Join(root, "LOC_val_solution.csv"), []byte(csv.String()))

	label := func(list []string, s string) int { i, _ := slices.BinarySearch(list, s); return i }
	t.Run("imagenet100 with Kaggle's csv found beside", func(t *testing.T) {
		r := readPlan(t, mustPlan(t, Spec{Dataset: ImageNet100, Input: val, Split: "val"}))
		var got []string
		for _, rec := range r.recs {
			got = append(got, fmt.Sprintf("%s=%d", rec.Key, rec.Label))
		}
		want := []string{"val/ILSVRC2012_val_00000001.JPEG=0", "val/ILSVRC2012_val_00000002.JPEG=99", "val/ILSVRC2012_val_00000004.JPEG=5"}
		if !slices.Equal(got, want) {
			t.Errorf("records %q, want %q", got, want)
		}
		if len(r.bads) != 1 || r.bads[0].Key != "val/ILSVRC2012_val_00000009.JPEG" || !contains(r.bads[0].Reason, "LOC_val_solution.csv has no label") {
			t.Errorf("bad records %v", r.bads)
		}
	})
	t.Run("imagenet with a plain labels file", func(t *testing.T) {
		labels := filepath.Join(root, "val.txt")
		testfiles.WriteFile(t, labels, fmt.Appendf(nil, "# name label\nILSVRC2012_val_00000001.JPEG %s\nILSVRC2012_val_00000002 %d\n"+
			"val/ILSVRC2012_val_00000003.JPEG\t%s\nILSVRC2012_val_00000004.JPEG %s\nILSVRC2012_val_00000009.JPEG 0\n",
			sub[0], label(all, sub[99]), "n01440764", sub[5]))
		p := mustPlan(t, Spec{Dataset: ImageNet, Input: val, Split: "val", LabelsFile: labels, UnitRecords: 2})
		r := readPlan(t, p)
		var got []int
		for _, rec := range r.recs {
			got = append(got, rec.Label)
		}
		if want := []int{label(all, sub[0]), label(all, sub[99]), 0, label(all, sub[5]), 0}; !slices.Equal(got, want) || len(r.bads) != 0 {
			t.Errorf("labels %v, want %v; bad %v", got, want, r.bads)
		}
	})
	t.Run("labels for missing images", func(t *testing.T) {
		labels := filepath.Join(root, "more.txt")
		testfiles.WriteFile(t, labels, fmt.Appendf(nil, "ILSVRC2012_val_00000001 %s\nILSVRC2012_val_00000042 %s\n", sub[0], sub[1]))
		wantErrorMentions(t, planErr(t, Spec{Dataset: ImageNet100, Input: val, Split: "val", LabelsFile: labels}),
			"more.txt labels 1 images", "ILSVRC2012_val_00000042")
	})
	t.Run("no labels file", func(t *testing.T) {
		other := filepath.Join(t.TempDir(), "val")
		testfiles.WriteFile(t, filepath.Join(other, "a.JPEG"), testfiles.JPEG(t, 2, 2, 1))
		wantErrorMentions(t, planErr(t, Spec{Dataset: ImageNet, Input: other, Split: "val"}), "needs a labels file", "LOC_val_solution.csv")
	})
	t.Run("flat train folder", func(t *testing.T) {
		flat := filepath.Join(t.TempDir(), "flat")
		testfiles.WriteFile(t, filepath.Join(flat, "a.JPEG"), testfiles.JPEG(t, 2, 2, 1))
		wantErrorMentions(t, planErr(t, Spec{Dataset: ImageNet, Input: flat, Split: "train"}), "images at its top, not synset folders")
	})
}

func TestParseValLabels(t *testing.T) {
	tests := []struct {
		name    string
		give    string
		want    map[string]string
		wantErr string
	}{
		{name: "csv", give: "\ufeffImageId,PredictionString\nILSVRC2012_val_00008726,n02119789 255 142 454 329 n02119789 44 21 322 295\n",
			want: map[string]string{"ILSVRC2012_val_00008726": "n02119789"}},
		{name: "plain with synsets and indices", give: "a.JPEG n01443537\n\n# comment\nsub/b.jpeg 999\nc 0\n",
			want: map[string]string{"a": "n01443537", "b": "n15075141", "c": "n01440764"}},
		{name: "csv boxes disagree", give: "ImageId,PredictionString\nx,n02119789 1 2 3 4 n01440764 1 2 3 4\n", wantErr: "line 2: x has boxes of n02119789 and n01440764"},
		{name: "unknown synset", give: "a n99999999\n", wantErr: `line 1: "n99999999" is not an ILSVRC-2012 synset`},
		{name: "index out of range", give: "a 1000\n", wantErr: `line 1: label "1000" is neither a synset nor an integer 0..999`},
		{name: "devkit ground truth", give: "490\n361\n", wantErr: `line 1: want FILENAME LABEL, got "490"`},
		{name: "conflict", give: "a.JPEG 1\na.png 2\n", wantErr: "line 2: a labelled n01484850 here and n01443537 before"},
		{name: "empty", give: "# nothing\n", wantErr: "labels no images"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseValLabels("labels.txt", []byte(tt.give))
			if tt.wantErr != "" {
				wantErrorMentions(t, err, "labels.txt", tt.wantErr)
				return
			}
			if err != nil || fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("got %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}
