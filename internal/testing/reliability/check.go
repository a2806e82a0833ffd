// Package reliability declares what docs/reliability.md promises, each promise beside the
// tests that check it: Claims is the one place a reliability claim is written, `make docs`
// (internal/cmd/docsgen) writes the document's list from it, and Check refuses a claim
// without a test or naming a test that does not exist, so that the document claims nothing
// the tests do not check.
package reliability

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Claim is one promise of docs/reliability.md.
type Claim struct {
	// Title is the promise in a few words, a sentence of its own ("Storage fails fast.").
	Title string
	// Text says what holds, for a user: Markdown, one paragraph.
	Text string
	// Tests are the tests that check it, by package.
	Tests []Tests
}

// Tests are tests of one package.
type Tests struct {
	// Package is the package's folder from the repository's root, "./internal/storage".
	Package string
	// Names are top-level Test or Fuzz functions of the package's test files.
	Names []string
}

// Markdown is the claims as the list docs/reliability.md shows: each claim, then the command
// that runs its tests.
func Markdown(claims []Claim) string {
	var b strings.Builder
	for _, c := range claims {
		fmt.Fprintf(&b, "- **%s** %s\n", c.Title, c.Text)
		var runs []string
		for _, ts := range c.Tests {
			runs = append(runs, fmt.Sprintf("`go test -run '^(%s)$' %s`", strings.Join(ts.Names, "|"), ts.Package))
		}
		fmt.Fprintf(&b, "  Checked by %s.\n", strings.Join(runs, "; "))
	}
	return b.String()
}

var testName = regexp.MustCompile(`^(Test|Fuzz)([^a-z].*)?$`)

// Check returns an error for each claim under root without a test or naming a test that
// its package's test files do not hold (as go test would run it: a top-level function
// named Test… or Fuzz… in a _test.go file of that folder, whatever its build tags).
func Check(root string, claims []Claim) error {
	found := map[string]map[string]bool{} // package → its tests
	var problems []error
	titles := map[string]bool{}
	for _, c := range claims {
		if titles[c.Title] {
			problems = append(problems, fmt.Errorf("claim %q is declared twice", c.Title))
		}
		titles[c.Title] = true
		if len(c.Tests) == 0 {
			problems = append(problems, fmt.Errorf("claim %q names no test that checks it: add one, or remove the claim", c.Title))
		}
		for _, ts := range c.Tests {
			tests, ok := found[ts.Package]
			if !ok {
				var err error
				if tests, err = testsOf(filepath.Join(root, filepath.FromSlash(ts.Package))); err != nil {
					return err
				}
				found[ts.Package] = tests
			}
			if len(ts.Names) == 0 {
				problems = append(problems, fmt.Errorf("claim %q: no test named in %s", c.Title, ts.Package))
			}
			for _, n := range ts.Names {
				if !testName.MatchString(n) || !tests[n] {
					problems = append(problems, fmt.Errorf("claim %q: %s has no test %s", c.Title, ts.Package, n))
				}
			}
		}
	}
	return errors.Join(problems...)
}

// testsOf returns the Test and Fuzz functions of the _test.go files in dir.
func testsOf(dir string) (map[string]bool, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	tests := map[string]bool{}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, e.Name()), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && testName.MatchString(fn.Name.Name) {
				tests[fn.Name.Name] = true
			}
		}
	}
	return tests, nil
}
