package analysis

import (
	"strconv"
	"strings"
)

// NPCReport is the NPC statistics of one set of embeddings (one method or temperature),
// per batch size: what `dcl npc` writes as JSON and draws as the paper's Fig. 1.
type NPCReport struct {
	// Name labels the series in tables and plots, e.g. "SimCLR (InfoNCE) τ=0.1".
	Name        string     `json:"name"`
	Source      string     `json:"source,omitempty"` // the embeddings file
	Temperature float64    `json:"temperature"`
	Seed        uint64     `json:"seed"`
	Pairs       int        `json:"pairs"` // view pairs available
	Stats       []NPCStats `json:"stats"` // one per batch size, in the order computed
}

// Table is a table of text cells, rendered as Markdown.
type Table struct {
	Header []string
	Rows   [][]string
	// RightAlign marks numeric columns by index.
	RightAlign []bool
}

// Markdown renders the table with its columns padded to equal width; a `|` in a cell is
// escaped.
func (t Table) Markdown() string {
	cols := len(t.Header)
	for _, r := range t.Rows {
		cols = max(cols, len(r))
	}
	cell := func(row []string, c int) string {
		if c < len(row) {
			return strings.ReplaceAll(row[c], "|", `\|`)
		}
		return ""
	}
	width := make([]int, cols)
	for c := range cols {
		width[c] = max(3, len([]rune(cell(t.Header, c))))
		for _, r := range t.Rows {
			width[c] = max(width[c], len([]rune(cell(r, c))))
		}
	}
	right := func(c int) bool { return c < len(t.RightAlign) && t.RightAlign[c] }
	var b strings.Builder
	line := func(row []string) {
		b.WriteString("|")
		for c := range cols {
			s := cell(row, c)
			pad := strings.Repeat(" ", width[c]-len([]rune(s)))
			if right(c) {
				b.WriteString(" " + pad + s + " |")
			} else {
				b.WriteString(" " + s + pad + " |")
			}
		}
		b.WriteString("\n")
	}
	line(t.Header)
	b.WriteString("|")
	for c := range cols {
		if right(c) {
			b.WriteString(" " + strings.Repeat("-", width[c]-1) + ": |")
		} else {
			b.WriteString(" " + strings.Repeat("-", width[c]) + " |")
		}
	}
	b.WriteString("\n")
	for _, r := range t.Rows {
		line(r)
	}
	return b.String()
}

// NPCTable tabulates NPC statistics: one row per series and batch size.
func NPCTable(reports []NPCReport) Table {
	t := Table{
		Header:     []string{"series", "batch size", "anchors", "mean q", "std", "C_v", "q 5%", "median", "q 95%"},
		RightAlign: []bool{false, true, true, true, true, true, true, true, true},
	}
	for _, r := range reports {
		for _, s := range r.Stats {
			t.Rows = append(t.Rows, []string{
				r.Name, strconv.Itoa(s.BatchSize), strconv.FormatInt(s.Anchors, 10),
				f4(s.Mean), f4(s.Std), f4(s.CV),
				quantileAt(s, 0.05), quantileAt(s, 0.5), quantileAt(s, 0.95),
			})
		}
	}
	return t
}

// AccuracyTable tabulates named top-1/top-5 results (kNN or linear), in the given order.
func AccuracyTable(names []string, results []Accuracy) Table {
	t := Table{Header: []string{"run", "top-1 %", "top-5 %"}, RightAlign: []bool{false, true, true}}
	for i, name := range names {
		t.Rows = append(t.Rows, []string{name, f2(results[i].Top1), f2(results[i].Top5)})
	}
	return t
}

// quantileAt formats quantile p of s, or "–" when it was not computed.
func quantileAt(s NPCStats, p float64) string {
	for _, q := range s.Quantiles {
		if q.P == p {
			return f4(q.Value)
		}
	}
	return "–"
}

func f4(x float64) string { return strconv.FormatFloat(x, 'f', 4, 64) }
func f2(x float64) string { return strconv.FormatFloat(x, 'f', 2, 64) }
