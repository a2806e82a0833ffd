package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// cpuCompareGlob names the measurements scripts/cpu_compare.py writes (--out), kept one file a
// day; the sections show the newest.
const cpuCompareGlob = "docs/benchmarks/cpu-compare-*.jsonl"

// cpuMeasurement is one line of scripts/cpu_compare.py's output: one side's figure for one row
// in one round.
type cpuMeasurement struct {
	Row   string  `json:"row"`
	Side  string  `json:"side"` // ours, eager, compiled or openblas
	Value float64 `json:"value"`
	CPU   float64 `json:"cpu"` // the same per CPU-second of the process
	Unit  string  `json:"unit"`
	Round int     `json:"round"`
	BLAS  string  `json:"blas"`
	Load  string  `json:"load"` // the machine's load averages over 1, 5 and 15 minutes, when recorded
	// Priority is the scheduling priority the comparison ran at (cpu_compare.py --priority),
	// when recorded: at the highest, the machine's other work barely shares its cores.
	Priority string `json:"priority"`
}

// cpuComparison is one kept run of the comparison: its file and measurements in file order.
type cpuComparison struct {
	file string
	ms   []cpuMeasurement
}

// loadCPUComparison reads the newest kept comparison, or returns nil when none is kept.
func loadCPUComparison(root string) (*cpuComparison, error) {
	files, err := filepath.Glob(filepath.Join(root, cpuCompareGlob))
	if err != nil || len(files) == 0 {
		return nil, err
	}
	sort.Strings(files) // dated names: the last is the newest
	path := files[len(files)-1]
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	c := &cpuComparison{file: filepath.ToSlash(strings.TrimPrefix(path, filepath.Clean(root)+string(filepath.Separator)))}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var m cpuMeasurement
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		if m.Row == "" || m.Side == "" || m.Unit == "" || !(m.Value > 0) || !(m.CPU > 0) {
			return nil, fmt.Errorf("%s:%d: a measurement needs a row, side, unit and positive value and cpu", path, n)
		}
		c.ms = append(c.ms, m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(c.ms) == 0 {
		return nil, fmt.Errorf("%s: no measurements", path)
	}
	return c, nil
}

// rows are the comparison's rows in the order first measured.
func (c *cpuComparison) rows() []string {
	var rows []string
	for _, m := range c.ms {
		if !slices.Contains(rows, m.Row) {
			rows = append(rows, m.Row)
		}
	}
	return rows
}

func (c *cpuComparison) rounds() int {
	seen := map[int]bool{}
	for _, m := range c.ms {
		seen[m.Round] = true
	}
	return len(seen)
}

// median of one row's side over the rounds, per wall time or per CPU-second; ok is false when
// the side was not measured.
func (c *cpuComparison) median(row, side string, perCPU bool) (v float64, ok bool) {
	var vals []float64
	for _, m := range c.ms {
		if m.Row == row && m.Side == side {
			vals = append(vals, map[bool]float64{false: m.Value, true: m.CPU}[perCPU])
		}
	}
	if len(vals) == 0 {
		return 0, false
	}
	slices.Sort(vals)
	n := len(vals)
	if n%2 == 1 {
		return vals[n/2], true
	}
	return (vals[n/2-1] + vals[n/2]) / 2, true
}

// load is the range of the 1-minute load average the measurements recorded, or "" when none did.
func (c *cpuComparison) load() string {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, m := range c.ms {
		var one float64
		if _, err := fmt.Sscan(m.Load, &one); err == nil {
			lo, hi = min(lo, one), max(hi, one)
		}
	}
	if math.IsInf(lo, 1) {
		return ""
	}
	return fmt.Sprintf("%.1f–%.1f", lo, hi)
}

// priority is the scheduling priority every measurement recorded, or "" when one recorded none
// or they differ.
func (c *cpuComparison) priority() string {
	p := c.ms[0].Priority
	for _, m := range c.ms {
		if m.Priority != p {
			return ""
		}
	}
	return p
}

func (c *cpuComparison) unit(row string) string {
	for _, m := range c.ms {
		if m.Row == row {
			return m.Unit
		}
	}
	return ""
}

// speedup says how many times faster ours is than a reference: their time over ours for
// times, our rate over theirs for rates.
func speedup(unit string, ours, theirs float64) float64 {
	if unit == "ms/image" {
		return theirs / ours
	}
	return ours / theirs
}

func cpuFigure(v float64) string {
	if v < 100 {
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

// cpuCompareTables are the medians of the newest kept comparison, per wall time and per
// CPU-second, with ours ÷ each reference.
func cpuCompareTables(_ context.Context, g *generator, _ section) (string, []error, error) {
	c, err := loadCPUComparison(g.root)
	if err != nil || c == nil {
		return "No comparison is kept yet (`scripts/cpu_compare.py --out docs/benchmarks/cpu-compare-DATE.jsonl`).\n", nil, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "From `%s`.\n", c.file)
	for _, perCPU := range []bool{false, true} {
		title := "wall time"
		if perCPU {
			title = "per CPU-second (the process's CPU time)"
		}
		fmt.Fprintf(&b, "\n%s, medians of %d rounds:\n\n", title, c.rounds())
		b.WriteString("| what | unit | ours | PyTorch eager | torch.compile | ours ÷ eager | ours ÷ compiled |\n|---|---|---:|---:|---:|---:|---:|\n")
		var gemm []string
		for _, row := range c.rows() {
			unit := c.unit(row)
			ours, haveOurs := c.median(row, "ours", perCPU)
			if blas, ok := c.median(row, "openblas", perCPU); ok && haveOurs {
				gemm = append(gemm, fmt.Sprintf("| %s | %s | %s | %s | %.2f× |\n", row, unit, cpuFigure(ours), cpuFigure(blas), speedup(unit, ours, blas)))
				continue
			}
			cells, ratios := make([]string, 3), make([]string, 2)
			if haveOurs {
				cells[0] = cpuFigure(ours)
			}
			for i, side := range []string{"eager", "compiled"} {
				if v, ok := c.median(row, side, perCPU); ok {
					cells[i+1] = cpuFigure(v)
					if haveOurs {
						ratios[i] = fmt.Sprintf("%.2f×", speedup(unit, ours, v))
					}
				}
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", row, unit, cells[0], cells[1], cells[2], ratios[0], ratios[1])
		}
		if len(gemm) > 0 {
			var libs []string
			for _, m := range c.ms {
				if m.BLAS != "" && !slices.Contains(libs, m.BLAS) {
					libs = append(libs, m.BLAS)
				}
			}
			slices.Sort(libs)
			fmt.Fprintf(&b, "\n| what | unit | ours | OpenBLAS (%s) | ours ÷ OpenBLAS |\n|---|---|---:|---:|---:|\n", strings.Join(libs, ", "))
			b.WriteString(strings.Join(gemm, ""))
		}
	}
	return b.String(), nil, nil
}

// cpuCompareSummary is the manual's one paragraph of speed: the range of ours ÷ each reference
// over the training steps and over inference, per CPU-second and in wall time.
func cpuCompareSummary(_ context.Context, g *generator, _ section) (string, []error, error) {
	c, err := loadCPUComparison(g.root)
	if err != nil || c == nil {
		return "No CPU comparison is kept yet (`BENCHMARKS.md`).\n", nil, err
	}
	span := func(perCPU bool, kind func(row string) bool, side string) string {
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, row := range c.rows() {
			if !kind(row) {
				continue
			}
			ours, ok1 := c.median(row, "ours", perCPU)
			ref, ok2 := c.median(row, side, perCPU)
			if !ok1 || !ok2 {
				continue
			}
			r := speedup(c.unit(row), ours, ref)
			lo, hi = min(lo, r), max(hi, r)
		}
		switch {
		case math.IsInf(lo, 1):
			return ""
		case fmt.Sprintf("%.2f", lo) == fmt.Sprintf("%.2f", hi):
			return fmt.Sprintf("%.2f×", lo)
		}
		return fmt.Sprintf("%.2f–%.2f×", lo, hi)
	}
	unit := func(u string) func(row string) bool { return func(row string) bool { return c.unit(row) == u } }
	var b strings.Builder
	head := fmt.Sprintf("Speed against PyTorch 2.15 and OpenBLAS on two threads (`BENCHMARKS.md`, \"CPU against PyTorch "+
		"2.15\": medians of %d rounds in `%s`; ours ÷ theirs, above 1 is ours faster", c.rounds(), c.file)
	order := []bool{true, false} // on a loaded machine the CPU time is the steadier figure
	if p := c.priority(); p != "" {
		head += fmt.Sprintf("; they ran at the highest scheduling priority (%s)", p)
		order = []bool{false, true}
		if l := c.load(); l != "" {
			head += fmt.Sprintf(" with the 1-minute load average at %s (the comparison's own two threads make 2)", l)
		}
	} else if l := c.load(); l != "" {
		head += fmt.Sprintf("; the machine's 1-minute load average was %s while they ran", l)
	}
	b.WriteString(wrap(head+").", 98))
	for _, perCPU := range order {
		var parts []string
		for _, g := range []struct {
			what, unit string
			refs       [][2]string // side, its name
		}{
			{"the training steps", "ms/image", [][2]string{{"eager", "PyTorch eager"}, {"compiled", "torch.compile"}}},
			{"inference", "images/s", [][2]string{{"eager", "PyTorch eager"}, {"compiled", "torch.compile"}}},
			{"float32 GEMM", "GFLOP/s", [][2]string{{"openblas", "OpenBLAS"}}},
		} {
			var against []string
			for _, ref := range g.refs {
				if r := span(perCPU, unit(g.unit), ref[0]); r != "" {
					against = append(against, r+" "+ref[1])
				}
			}
			if len(against) > 0 {
				parts = append(parts, g.what+" "+strings.Join(against, " and "))
			}
		}
		how := "Per CPU-second: "
		if !perCPU {
			how = "In wall time: "
		}
		b.WriteString(wrap(how+strings.Join(parts, "; ")+".", 98))
	}
	return b.String(), nil, nil
}

// wrap breaks text into lines of at most width runes at spaces, each ending in a newline.
func wrap(text string, width int) string {
	var b strings.Builder
	line := 0
	for i, w := range strings.Fields(text) {
		n := len([]rune(w))
		if i > 0 && line+1+n > width {
			b.WriteString("\n")
			line = 0
		} else if i > 0 {
			b.WriteString(" ")
			line++
		}
		b.WriteString(w)
		line += n
	}
	return b.String() + "\n"
}
