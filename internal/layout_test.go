package internal

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/dcl-beam/dcl-beam/"

// TestLibrariesImportNoDomainPackage keeps internal/'s libraries at the bottom of the layers:
// a library package may import other libraries under internal/ (and, from its tests, the test
// helpers under internal/testing/), never a domain package (pipelines, trainstep, shards,
// transforms, analysis, reproduce, gpu, verify, experiments, cmd). Helper programs
// (internal/cmd/…) and test helpers (internal/testing/…) may import anything.
func TestLibrariesImportNoDomainPackage(t *testing.T) {
	checked := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if path == "cmd" || path == "testing" || path != "." && strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" {
			return filepath.SkipDir
		}
		entries, err := os.ReadDir(path)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") {
				continue
			}
			file := filepath.Join(path, e.Name())
			f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ImportsOnly)
			if err != nil {
				return err
			}
			checked++
			for _, imp := range f.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				if why := forbidden(p, strings.HasSuffix(file, "_test.go")); why != "" {
					t.Errorf("%s imports %s: %s", filepath.Join("internal", file), p, why)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 20 {
		t.Fatalf("only %d files checked: the walk is not reading internal/", checked)
	}
}

// forbidden says why a library file may not import p ("" when it may).
func forbidden(p string, test bool) string {
	rest, ours := strings.CutPrefix(p, module)
	switch {
	case !ours:
		return ""
	case strings.HasPrefix(rest, "internal/cmd/"):
		return "a library may not import a helper program"
	case strings.HasPrefix(rest, "internal/testing/"):
		if test {
			return ""
		}
		return "only tests may import the test helpers"
	case strings.HasPrefix(rest, "internal/"):
		return ""
	default:
		return "a library under internal/ may not import a domain package; move the code beside what it serves"
	}
}
