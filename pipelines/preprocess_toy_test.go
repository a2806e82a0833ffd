package pipelines

import (
	"bufio"
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/internal/testing/testfiles"
	"github.com/dcl-beam/dcl-beam/shards"
	"github.com/dcl-beam/dcl-beam/transforms"
	"github.com/dcl-beam/dcl-beam/transforms/augment"
	"github.com/dcl-beam/dcl-beam/transforms/datasets"
)

// A toy dataset with a format of its own, added as the datasets package says a dataset is
// added: this file's init registers the dataset and its unit kind, and nothing else in the
// code base knows them. Its input is a folder of .toy text files, one 8×8 grey image a line:
// "LABEL PIXELS", the 64 pixels as letters a..p (0, 17, …, 255). A line's reference is its
// byte range in the file, which the kind alone writes and reads.
const (
	toyDataset = "toy-lines"
	toyKind    = "toy-lines"
	toySide    = 8
)

func init() {
	datasets.RegisterKind(toyKind, datasets.Kind{Read: readToyUnit, Fetch: fetchToy})
	datasets.Register(datasets.Descriptor{
		Name: toyDataset, Summary: "toy images, one a line", Input: "a folder of .toy files", Splits: []string{"train"},
		Classes: func(bool) []string { return []string{"dark", "light"} }, Published: map[string]int64{"train": 7},
		ViewSize: toySide, Channels: 1, Mean: []float64{0.5}, Std: []float64{0.3}, Augment: augment.SimCLRCIFAR,
		Plan: planToy,
	})
}

// planToy makes one unit of each .toy file of the input, counting its lines.
func planToy(ctx context.Context, s datasets.Spec) (datasets.Plan, error) {
	files, err := storage.List(ctx, storage.Join(s.Input, "*.toy"))
	if err != nil {
		return datasets.Plan{}, err
	}
	p := datasets.Plan{Classes: []string{"dark", "light"}}
	var index int64
	for _, f := range files {
		data, err := storage.ReadFile(ctx, f)
		if err != nil {
			return datasets.Plan{}, err
		}
		n := int64(strings.Count(string(data), "\n"))
		p.Units = append(p.Units, datasets.Unit{Kind: toyKind, Split: s.Split, Path: f, Records: n, Exact: true, Index: index})
		index += n
	}
	return p, nil
}

func toyKey(u *datasets.Unit, line int64) string {
	return fmt.Sprintf("%s/%s/%d", u.Split, strings.TrimSuffix(filepath.Base(u.Path), ".toy"), line)
}

// parseToyLine makes the record of one line; an error makes it a bad record.
func parseToyLine(line string) (int, transforms.Image, error) {
	label, pix, ok := strings.Cut(line, " ")
	l, err := strconv.Atoi(label)
	if !ok || err != nil || l < 0 || l > 1 || len(pix) != toySide*toySide {
		return 0, transforms.Image{}, fmt.Errorf("want a label 0 or 1 and %d pixels, got %q", toySide*toySide, line)
	}
	img := transforms.NewImage(toySide, toySide, 1)
	for i := range img.Pix {
		img.Pix[i] = (pix[i] - 'a') * 17
	}
	return l, img, nil
}

func readToyUnit(ctx context.Context, u datasets.Unit, emit func(datasets.Record) error, bad func(datasets.BadRecord) error) (int64, error) {
	rc, err := storage.Open(ctx, u.Path)
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	sc := bufio.NewScanner(rc)
	var offset int64
	for line := int64(0); sc.Scan(); line++ {
		text := sc.Text()
		key := toyKey(&u, line)
		label, img, err := parseToyLine(text)
		if err != nil {
			err = bad(datasets.BadRecord{Source: u.Path, Position: datasets.Position{Offset: offset}, Key: key, Reason: err.Error()})
		} else {
			err = emit(datasets.Record{Key: key, Index: u.Index + line, Label: label, Source: u.Path, Offset: offset,
				Ref: fmt.Sprintf("%d %d", offset, len(text)), Pixels: img, Width: toySide, Height: toySide})
		}
		if err != nil {
			return 0, err
		}
		offset += int64(len(text)) + 1
	}
	return 0, sc.Err()
}

func fetchToy(ctx context.Context, f *datasets.Fetcher, refs []datasets.Ref, got func(int, datasets.Record) error) error {
	for i, r := range refs {
		u := f.Unit(r)
		var offset, length int64
		if _, err := fmt.Sscanf(r.Ref, "%d %d", &offset, &length); err != nil {
			return fmt.Errorf("toy reference %q: %w", r.Ref, err)
		}
		file, err := f.Open(ctx, u.Path)
		if err != nil {
			return err
		}
		buf := make([]byte, length)
		if _, err := file.ReadAt(buf, offset); err != nil && err != io.EOF {
			return err
		}
		label, img, err := parseToyLine(string(buf))
		if err != nil {
			continue // gone bad since it was read: the caller reports it
		}
		rec := datasets.Record{Key: toyKey(u, r.Index-u.Index), Index: r.Index, Label: label, Source: u.Path, Offset: offset,
			Ref: r.Ref, Pixels: img, Width: toySide, Height: toySide}
		if err := got(i, rec); err != nil {
			return err
		}
	}
	return nil
}

// TestToyDatasetWithItsOwnKindPreprocesses: the toy dataset above, known only to its own
// registration, preprocesses on prism to shards that verification accepts, with every
// record written in every pass and its bad line a dead letter at the line's byte offset.
func TestToyDatasetWithItsOwnKindPreprocesses(t *testing.T) {
	in := t.TempDir()
	line := func(label, shade int) string {
		return fmt.Sprintf("%d %s\n", label, strings.Repeat(string(rune('a'+shade)), toySide*toySide))
	}
	a := line(0, 1) + line(1, 14) + line(0, 3) + line(1, 12)
	bad := "7 not an image\n"
	testfiles.WriteFile(t, filepath.Join(in, "a.toy"), []byte(a))
	testfiles.WriteFile(t, filepath.Join(in, "b.toy"), []byte(line(1, 15)+bad+line(0, 0)))
	o := PreprocessOptions{
		Spec:   datasets.Spec{Dataset: toyDataset, Input: in},
		Output: filepath.Join(t.TempDir(), "out"), Augment: preset(t, augment.SimCLRCIFAR, toySide),
		Passes: 2, Seed: 4, Parts: 2, MaxBadFraction: 0.2, CodeVersion: "test",
	}
	res := mustPreprocess(t, o)
	if m := res.Manifest; m.Records != 7 || m.Rows != 12 || m.DeadLetters.Count != 1 {
		t.Fatalf("manifest: %d records, %d rows, %d dead letters; want 7, 12 (6 a pass), 1", m.Records, m.Rows, m.DeadLetters.Count)
	}
	sum := mustVerify(t, o.Output)
	if sum.Labels[0] != 3*2 || sum.Labels[1] != 3*2 {
		t.Errorf("labels %v: want 3 of each class a pass", sum.Labels)
	}
	letters, err := shards.ReadDeadLetters(context.Background(), o.Output, res.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	want := shards.DeadLetter{Source: filepath.Join(in, "b.toy"), Position: int64(len(line(1, 15))), Key: "train/b/1",
		Reason: fmt.Sprintf("want a label 0 or 1 and 64 pixels, got %q", strings.TrimSuffix(bad, "\n"))}
	if len(letters) != 1 || letters[0] != want {
		t.Errorf("dead letters %+v, want %+v", letters, want)
	}
	for _, r := range readAllRows(t, o.Output) {
		if r.Pass == 0 && r.Key == "train/b/2" && r.Label != 0 {
			t.Errorf("row %s has label %d, want 0", r.Key, r.Label)
		}
	}
}

// TestPipelinesNameNoKind: the preprocessing code reads and fetches records through the
// kinds' registrations only, never naming one (a kind of its own, like the toy's above,
// would miss any branch that did).
func TestPipelinesNameNoKind(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if pkg, ok := sel.X.(*ast.Ident); ok && pkg.Name == "datasets" && strings.HasPrefix(sel.Sel.Name, "Kind") && sel.Sel.Name != "Kind" {
					t.Errorf("%s: names the unit kind datasets.%s", fset.Position(sel.Pos()), sel.Sel.Name)
				}
			}
			return true
		})
	}
}
