package docsections

import (
	"errors"
	"strings"
	"testing"
)

func section(name, body string) string {
	return Begin(name) + "\n" + body + End(name) + "\n"
}

// Splice puts the content between the markers with a blank line on either side, leaves the
// rest of the file alone, and Check then passes; a figure typed over fails Check, naming the
// line.
func TestSpliceAndCheck(t *testing.T) {
	doc := []byte("# Title\n\n" + section("demo", "old\n") + "after\n")
	got, err := Splice(doc, "demo", "| a | b |\n")
	if err != nil {
		t.Fatal(err)
	}
	want := "# Title\n\n" + Begin("demo") + "\n\n| a | b |\n\n" + End("demo") + "\nafter\n"
	if string(got) != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
	if err := Check(got, "demo", "| a | b |"); err != nil {
		t.Errorf("check right after splice: %v", err)
	}
	typed := []byte(strings.Replace(string(got), "| a |", "| c |", 1))
	if err := Check(typed, "demo", "| a | b |"); !errors.Is(err, ErrStale) || !strings.Contains(err.Error(), "line 5") {
		t.Errorf("check of a typed-over section: %v, want %v at line 5", err, ErrStale)
	}
	if _, err := Splice(doc, "other", "x"); err == nil {
		t.Error("splice into a file without the section: no error")
	}
}

// Names lists a file's sections in order and refuses markers that are not written as Begin
// and End write them, sections that do not close or nest, and other marker syntaxes.
func TestNames(t *testing.T) {
	doc := "# x\n" + section("demo", "a\n") + "text\n" + section("kill-hunt", "") + "  " + Begin("indented") + "\n"
	got, err := Names([]byte(doc))
	if err != nil || strings.Join(got, ",") != "demo,kill-hunt" {
		t.Errorf("Names = %v, %v; want demo,kill-hunt", got, err)
	}
	for what, bad := range map[string]string{
		"unclosed":            Begin("demo") + "\n",
		"nested":              Begin("a") + "\n" + section("b", "") + End("a") + "\n",
		"closed by another":   Begin("a") + "\n" + End("b") + "\n",
		"another target":      "<!-- generated: demo (make readme); do not edit between these markers -->\n" + End("demo") + "\n",
		"gpu-check's syntax":  "<!-- gpu-check summary: begin -->\nx\n<!-- gpu-check summary: end -->\n",
		"a stage table's own": "<!-- reproduce-stages: generated; do not edit -->\nx\n<!-- /reproduce-stages -->\n",
	} {
		if names, err := Names([]byte(bad)); err == nil {
			t.Errorf("%s: Names = %v, want an error", what, names)
		}
	}
}
