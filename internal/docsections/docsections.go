// Package docsections reads and writes the generated sections of the repository's Markdown
// files. A section's text is made from kept results by `make docs` (internal/cmd/docsgen),
// never typed, and sits between two marker lines that name it:
//
//	<!-- generated: NAME (make docs); do not edit between these markers -->
//
//	…
//
//	<!-- end of generated: NAME -->
//
// One syntax serves every file, so that one program can rewrite every section and one test
// can find a stale one wherever it is.
package docsections

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Begin and End are the marker lines of the section called name.
func Begin(name string) string {
	return "<!-- generated: " + name + " (make docs); do not edit between these markers -->"
}

// End is the line that closes the section called name.
func End(name string) string { return "<!-- end of generated: " + name + " -->" }

// Markers, each written by Begin and End, and anything at the start of a line that looks like
// one: a marker that does not parse is an error, not text. Lines of other marker syntaxes
// (`<!-- gpu-check NAME: begin -->`, `<!-- reproduce-stages: … -->`) are refused too, so that a
// section a merged branch marks in one of them is reported rather than left unwritten.
var (
	markerLike = regexp.MustCompile(`(?m)^<!-- (?:(?:end of )?generated:|gpu-check |/?reproduce-stages).*$`)
	beginLine  = regexp.MustCompile(`^<!-- generated: ([a-z0-9-]+) \(make docs\); do not edit between these markers -->$`)
	endLine    = regexp.MustCompile(`^<!-- end of generated: ([a-z0-9-]+) -->$`)
)

// Names lists the sections of doc in their order. Every begin marker must be closed by its
// end marker before the next section begins, and every marker must be written as Begin and
// End write it.
func Names(doc []byte) ([]string, error) {
	var names []string
	open := ""
	for _, loc := range markerLike.FindAllIndex(doc, -1) {
		line := string(doc[loc[0]:loc[1]])
		line = strings.TrimSuffix(line, "\r")
		if m := beginLine.FindStringSubmatch(line); m != nil {
			if open != "" {
				return nil, fmt.Errorf("section %q begins inside section %q", m[1], open)
			}
			open = m[1]
			continue
		}
		if m := endLine.FindStringSubmatch(line); m != nil {
			if m[1] != open {
				return nil, fmt.Errorf("%q ends a section that is not open (open: %q)", line, open)
			}
			names = append(names, open)
			open = ""
			continue
		}
		return nil, fmt.Errorf("marker %q: want %q … %q", line, Begin("NAME"), End("NAME"))
	}
	if open != "" {
		return nil, fmt.Errorf("section %q has no line %q", open, End(open))
	}
	return names, nil
}

// Splice returns doc with the section called name holding content, a blank line on either
// side of it.
func Splice(doc []byte, name, content string) ([]byte, error) {
	begin, end := Begin(name), End(name)
	i, j := bytes.Index(doc, []byte(begin)), bytes.Index(doc, []byte(end))
	if i < 0 || j < i {
		return nil, fmt.Errorf("no generated section %q: put the lines\n%s\n%s\nwhere it goes", name, begin, end)
	}
	var out bytes.Buffer
	out.Write(doc[:i+len(begin)])
	out.WriteString("\n\n" + strings.TrimSpace(content) + "\n\n")
	out.Write(doc[j:])
	return out.Bytes(), nil
}

// ErrStale is Check's answer when a section is not what its results give.
var ErrStale = errors.New("a generated section is not what its results give")

// Check reports whether doc's section called name holds content; the error says on which
// line they first differ.
func Check(doc []byte, name, content string) error {
	want, err := Splice(doc, name, content)
	if err != nil {
		return err
	}
	if bytes.Equal(want, doc) {
		return nil
	}
	got, exp := strings.Split(string(doc), "\n"), strings.Split(string(want), "\n")
	for i := range max(len(got), len(exp)) {
		g, e := lineAt(got, i), lineAt(exp, i)
		if g != e {
			return fmt.Errorf("%w (section %q, line %d):\n  file:    %s\n  results: %s", ErrStale, name, i+1, g, e)
		}
	}
	return ErrStale
}

func lineAt(lines []string, i int) string {
	if i < len(lines) {
		return lines[i]
	}
	return "(end of file)"
}
