package reliability

import (
	"strings"
	"testing"
)

const root = "../../.."

// Every claim of docs/reliability.md names tests, and each exists in its package.
func TestClaimsNameTestsThatExist(t *testing.T) {
	if err := Check(root, Claims); err != nil {
		t.Fatal(err)
	}
}

// A claim with no test, naming a test its package lacks or a function go test would not run,
// or declared twice, is refused by name.
func TestCheckRefusesAClaimWithoutItsTest(t *testing.T) {
	good := Tests{"./internal/storage", []string{"TestWritesKeepTheUmask"}}
	for _, c := range []struct {
		claims []Claim
		want   []string
	}{
		{[]Claim{{Title: "Untested.", Text: "x"}}, []string{`"Untested." names no test`}},
		{[]Claim{{Title: "Gone.", Tests: []Tests{good, {"./internal/storage", []string{"TestNoSuchThing"}}}}}, []string{`"Gone."`, "./internal/storage has no test TestNoSuchThing"}},
		{[]Claim{{Title: "Helper.", Tests: []Tests{{"./internal/storage", []string{"WriteFile"}}}}}, []string{"has no test WriteFile"}},
		{[]Claim{{Title: "Lowercase.", Tests: []Tests{{"./internal/storage", []string{"Testing"}}}}}, []string{"has no test Testing"}},
		{[]Claim{{Title: "Empty.", Tests: []Tests{{"./internal/storage", nil}}}}, []string{"no test named in ./internal/storage"}},
		{[]Claim{{Title: "Twice.", Tests: []Tests{good}}, {Title: "Twice.", Tests: []Tests{good}}}, []string{`"Twice." is declared twice`}},
	} {
		err := Check(root, c.claims)
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%+v: %v, want an error saying %q", c.claims, err, w)
			}
		}
	}
	if err := Check(root, []Claim{{Title: "Checked.", Tests: []Tests{good}}}); err != nil {
		t.Errorf("a claim naming a test that exists: %v", err)
	}
	if err := Check(root, []Claim{{Title: "Nowhere.", Tests: []Tests{{"./no/such/package", []string{"TestX"}}}}}); err == nil {
		t.Error("a claim naming a package that does not exist passed")
	}
}

// The document shows each claim with the command that runs its tests.
func TestMarkdownNamesTheCommands(t *testing.T) {
	got := Markdown([]Claim{{Title: "A.", Text: "It holds.", Tests: []Tests{{"./x", []string{"TestA", "TestB"}}, {"./y", []string{"FuzzC"}}}}})
	want := "- **A.** It holds.\n  Checked by `go test -run '^(TestA|TestB)$' ./x`; `go test -run '^(FuzzC)$' ./y`.\n"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}
