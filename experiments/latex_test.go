package experiments_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// excerptsFile holds the paper's tables and recipe text, verbatim (see its header).
const excerptsFile = "testdata/paper-excerpts.tex"

// paper is the paper's LaTeX excerpts, parsed: the text, and every table by its label.
type paper struct {
	text   string
	tables map[string]*texTable
	// number is each table's number in the paper ("Table 5"), from the excerpts' headers.
	number map[string]int
}

// texTable is a tabular's rows of cleaned cells; a \multicolumn{n} cell is repeated n times,
// so that a header row's cells stand over the columns they span.
type texTable struct {
	label string
	rows  [][]string
}

var (
	excerptHeader = regexp.MustCompile(`(?m)^%% excerpt lines (\d+)-(\d+): (.*)$`)
	labelRe       = regexp.MustCompile(`\\label\{(tab:[^}]*)\}`)
	tabularRe     = regexp.MustCompile(`(?s)\\begin\{tabular\}\{[^}]*\}(.*?)\\end\{tabular\}`)
	multicolumnRe = regexp.MustCompile(`^\\multicolumn\{(\d+)\}\{[^}]*\}\{(.*)\}$`)
)

func loadPaper(t *testing.T) *paper {
	t.Helper()
	data, err := os.ReadFile(excerptsFile)
	if err != nil {
		t.Fatal(err)
	}
	p := &paper{text: string(data), tables: map[string]*texTable{}, number: map[string]int{}}
	heads := excerptHeader.FindAllStringSubmatchIndex(p.text, -1)
	for i, h := range heads {
		end := len(p.text)
		if i+1 < len(heads) {
			end = heads[i+1][0]
		}
		chunk, what := p.text[h[1]:end], p.text[h[6]:h[7]]
		for _, env := range strings.Split(chunk, `\begin{table}`)[1:] {
			label := labelRe.FindStringSubmatch(env)
			body := tabularRe.FindStringSubmatch(env)
			if label == nil || body == nil {
				t.Fatalf("%s: a table without a label or a tabular in excerpt %q", excerptsFile, what)
			}
			tab := &texTable{label: label[1], rows: parseRows(body[1])}
			p.tables[tab.label] = tab
			if n, ok := strings.CutPrefix(what, "Table "); ok {
				num, err := strconv.Atoi(strings.Fields(n)[0])
				if err != nil {
					t.Fatalf("%s: excerpt %q: %v", excerptsFile, what, err)
				}
				p.number[tab.label] = num
			}
		}
	}
	return p
}

// parseRows splits a tabular's body into rows (\\) of cells (&), cleaned.
func parseRows(body string) [][]string {
	var rows [][]string
	for _, line := range strings.Split(body, `\\`) {
		var row []string
		for _, raw := range strings.Split(line, "&") {
			cell, span := cleanCell(raw)
			for range span {
				row = append(row, cell)
			}
		}
		if len(row) == 1 && row[0] == "" {
			continue
		}
		rows = append(rows, row)
	}
	return rows
}

var cellCleaners = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`(?m)%.*$`), ""},
	{regexp.MustCompile(`\\(hline|midrule|toprule|bottomrule|quad)\b`), ""},
	{regexp.MustCompile(`\\cellcolor\{[^}]*\}`), ""},
	// a gain printed after a figure: (\textcolor{pearDark}{\bf+2.8)}, (\textcolor{pearDark}{\bf+1.9}) or (+2.1)
	{regexp.MustCompile(`\(\\textcolor\{[^}]*\}\{[^}]*\}\)?`), ""},
	{regexp.MustCompile(`\([+-][0-9.]+\)`), ""},
	{regexp.MustCompile(`\\(textbf|bf)\{([^{}]*)\}`), "$2"},
	{regexp.MustCompile(`\\bf\b`), ""},
	{regexp.MustCompile(`\{\\bf\s*([^{}]*)\}`), "$1"},
	{regexp.MustCompile(`\$\\tau\$`), "τ"},
	{regexp.MustCompile(`[{}$]`), ""},
}

// cleanCell strips a cell's formatting and returns its text and how many columns it spans.
func cleanCell(raw string) (string, int) {
	s, span := strings.TrimSpace(raw), 1
	for _, c := range cellCleaners[:2] {
		s = strings.TrimSpace(c.re.ReplaceAllString(s, c.with))
	}
	if m := multicolumnRe.FindStringSubmatch(s); m != nil {
		span, _ = strconv.Atoi(m[1])
		s = m[2]
	}
	for _, c := range cellCleaners[2:] {
		s = c.re.ReplaceAllString(s, c.with)
	}
	return strings.Join(strings.Fields(s), " "), span
}

// cell returns the table's cell in the row whose first cell is row and the one column where,
// for every key of cols, the nearest header row above it (the row whose first cell is the
// key) holds cols[key]. It fails unless exactly one cell matches.
func (tab *texTable) cell(t *testing.T, row string, cols map[string]string) string {
	t.Helper()
	var found []string
	for i, r := range tab.rows {
		if r[0] != row {
			continue
		}
		var match []int
		for j := 1; j < len(r); j++ {
			ok := true
			for key, want := range cols {
				h := tab.header(i, key)
				ok = ok && h != nil && j < len(h) && h[j] == want
			}
			if ok {
				match = append(match, j)
			}
		}
		if len(match) == 1 {
			found = append(found, r[match[0]])
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s: %d cells in row %q under %v, want 1 (rows: %q)", tab.label, len(found), row, cols, tab.rows)
	}
	return found[0]
}

// header is the nearest row above row i whose first cell is key.
func (tab *texTable) header(i int, key string) []string {
	for k := i - 1; k >= 0; k-- {
		if tab.rows[k][0] == key {
			return tab.rows[k]
		}
	}
	return nil
}

// figure reads a cell as a number; part picks one of "kNN/Linear" pairs (0 or 1), -1 the
// whole cell.
func figure(t *testing.T, cell string, part int) float64 {
	t.Helper()
	if part >= 0 {
		parts := strings.Split(cell, "/")
		if part >= len(parts) {
			t.Fatalf("cell %q has no part %d", cell, part)
		}
		cell = parts[part]
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(cell), 64)
	if err != nil {
		t.Fatalf("cell %q is not a figure: %v", cell, err)
	}
	return v
}

// fact returns the first group of re, which must match the excerpts' text exactly once: a
// fact of the recipe as the paper states it.
func (p *paper) fact(t *testing.T, re string) string {
	t.Helper()
	m := regexp.MustCompile(re).FindAllStringSubmatch(p.text, -1)
	if len(m) != 1 {
		t.Fatalf("the paper states %q %d times, want once", re, len(m))
	}
	return m[0][1]
}

func (p *paper) factFloat(t *testing.T, re string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(strings.TrimSuffix(p.fact(t, re), "."), 64) // a figure that ends a sentence
	if err != nil {
		t.Fatalf("%q: %v", re, err)
	}
	return v
}

func (p *paper) table(t *testing.T, label string) *texTable {
	t.Helper()
	tab, ok := p.tables[label]
	if !ok {
		t.Fatalf("no table %s in %s", label, excerptsFile)
	}
	return tab
}

// source is how a config names table label: "Table 5".
func (p *paper) source(t *testing.T, label string) string {
	t.Helper()
	n, ok := p.number[label]
	if !ok {
		t.Fatalf("%s: table %s has no number", excerptsFile, label)
	}
	return fmt.Sprintf("Table %d", n)
}

// paperTeX is the whole LaTeX source, where it is found: DCL_PAPER_TEX, or the shared
// reference folder beside the checkout.
func paperTeX() (string, bool) {
	for _, p := range []string{os.Getenv("DCL_PAPER_TEX"), filepath.Join("..", "..", "shared", "reference", "decoupled-contrastive-learning.tex")} {
		if p == "" {
			continue
		}
		if data, err := os.ReadFile(p); err == nil {
			return string(data), true
		}
	}
	return "", false
}

// The excerpts are the paper's own lines, and each table is the one its header numbers:
// checked against the whole LaTeX source where it is at hand.
func TestPaperExcerptsAreVerbatim(t *testing.T) {
	full, ok := paperTeX()
	if !ok {
		t.Skip("the paper's LaTeX is not here (../shared/reference/decoupled-contrastive-learning.tex or DCL_PAPER_TEX)")
	}
	lines := strings.Split(full, "\n")
	data, err := os.ReadFile(excerptsFile)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	heads := excerptHeader.FindAllStringSubmatchIndex(text, -1)
	if len(heads) == 0 {
		t.Fatal("no excerpts")
	}
	for i, h := range heads {
		end := len(text)
		if i+1 < len(heads) {
			end = heads[i+1][0]
		}
		from, _ := strconv.Atoi(text[h[2]:h[3]])
		to, _ := strconv.Atoi(text[h[4]:h[5]])
		what := text[h[6]:h[7]]
		// Each excerpt ends with a newline, and all but the last with a blank line after it.
		got := strings.TrimSuffix(text[h[1]+1:end], "\n")
		if i+1 < len(heads) {
			got = strings.TrimSuffix(got, "\n")
		}
		if to > len(lines) || from < 1 || from > to {
			t.Errorf("excerpt %q: lines %d-%d are not in the paper's %d lines", what, from, to, len(lines))
			continue
		}
		if want := strings.Join(lines[from-1:to], "\n"); got != want {
			t.Errorf("excerpt %q (lines %d-%d) is not the paper's text there", what, from, to)
		}
		if n, ok := strings.CutPrefix(what, "Table "); ok {
			// The paper's tables are numbered in order of their table environments.
			tables := strings.Count(strings.Join(lines[:from], "\n"), `\begin{table}`)
			if num, _ := strconv.Atoi(strings.Fields(n)[0]); num != tables {
				t.Errorf("excerpt %q: it is the paper's table %d", what, tables)
			}
		}
	}
}
