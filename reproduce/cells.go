package reproduce

import (
	"maps"
	"reflect"
	"slices"

	"github.com/dcl-beam/dcl-beam/analysis"
	"github.com/dcl-beam/dcl-beam/trainstep"
)

// comparedMetrics are the figures cells are compared on: the paper's two accuracies.
var comparedMetrics = []string{"knn_top1", "linear_top1"}

// cellGroup is a cell's runs, in the config's order.
type cellGroup struct {
	name string
	runs []*RunResult
}

// groupCells groups runs by cell, cells in the order of their first run.
func groupCells(runs []RunResult) []cellGroup {
	var cells []cellGroup
	for i := range runs {
		r := &runs[i]
		j := slices.IndexFunc(cells, func(c cellGroup) bool { return c.name == r.cell() })
		if j < 0 {
			cells = append(cells, cellGroup{name: r.cell()})
			j = len(cells) - 1
		}
		cells[j].runs = append(cells[j].runs, r)
	}
	return cells
}

// summarise sets res.Cells (every figure's spread over each cell's seeds) and
// res.Comparisons (each cell against the InfoNCE cell of the same settings).
func summarise(res *Results) {
	res.Cells, res.Comparisons = nil, nil
	groups := groupCells(res.Runs)
	for _, g := range groups {
		c := CellResult{Name: g.name, Metrics: map[string]analysis.Spread{}}
		for _, r := range g.runs {
			c.Runs = append(c.Runs, r.Config.Name)
			c.Seeds = append(c.Seeds, r.Config.Seed())
		}
		for _, m := range metrics() {
			var values []float64
			for _, r := range g.runs {
				if v, ok := m.of(r); ok {
					values = append(values, v)
				}
			}
			if len(values) > 0 {
				c.Metrics[m.Name] = analysis.SpreadOf(values)
			}
		}
		res.Cells = append(res.Cells, c)
	}
	for i, g := range groups {
		if g.runs[0].Config.Loss() == string(trainstep.InfoNCE) {
			continue
		}
		j := slices.IndexFunc(groups, func(b cellGroup) bool {
			return b.runs[0].Config.Loss() == string(trainstep.InfoNCE) && sameSetting(b.runs[0].Config, g.runs[0].Config)
		})
		if j < 0 {
			continue
		}
		for _, m := range comparedMetrics {
			a, okA := res.Cells[j].Metrics[m]
			b, okB := res.Cells[i].Metrics[m]
			if okA && okB {
				res.Comparisons = append(res.Comparisons, Comparison{Cell: g.name, Baseline: groups[j].name, Metric: m,
					Difference: analysis.CompareSeeds(a, b)})
			}
		}
	}
}

// sameSetting reports whether two runs differ at most in their loss (and its own
// parameters), name and seed: cells whose figures compare the losses alone.
func sameSetting(a, b RunConfig) bool {
	strip := func(r RunConfig) map[string]any {
		s := maps.Clone(r.Settings)
		delete(s, trainstep.SettingLoss)
		delete(s, trainstep.SettingSeed)
		for _, p := range trainstep.LossParams() {
			delete(s, p.Name)
		}
		return s
	}
	return maps.EqualFunc(strip(a), strip(b), func(x, y any) bool { return reflect.DeepEqual(x, y) })
}

// cellSpread is a cell's spread of metric m, and whether it has the metric.
func (res *Results) cellSpread(cell, m string) (analysis.Spread, bool) {
	for _, c := range res.Cells {
		if c.Name == cell {
			s, ok := c.Metrics[m]
			return s, ok
		}
	}
	return analysis.Spread{}, false
}

// seeded reports whether any cell has more than one seed.
func (res *Results) seeded() bool {
	return slices.ContainsFunc(res.Cells, func(c CellResult) bool { return len(c.Runs) > 1 })
}
