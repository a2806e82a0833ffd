package reproduce

import (
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/analysis"
)

// A gate whose bound is smaller than the spread over the seeds that the same reproduction
// measures is one that noise alone fails: the results, the report and the command say so,
// naming the cell; a bound wider than the spread, and a metric measured with one seed, are
// not warned of.
func TestGatesBelowTheSeedSpreadAreWarned(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	res := &Results{Cells: []CellResult{
		{Name: "infonce", Metrics: map[string]analysis.Spread{"knn_top1": analysis.SpreadOf([]float64{70, 70.4}), "linear_top1": analysis.SpreadOf([]float64{75})}},
		{Name: "dcl", Metrics: map[string]analysis.Spread{"knn_top1": analysis.SpreadOf([]float64{78, 80, 79})}},
	}}
	cfg := &Config{Gates: map[string]Gate{
		"knn_top1":    {MaxDropVsPrevious: f(0.5), MaxDropVsPaper: f(3)},
		"linear_top1": {MaxDropVsPrevious: f(0)},
	}}
	compare(cfg, res, nil)
	if len(res.GateWarnings) != 1 {
		t.Fatalf("warnings %q, want one: knn_top1's bound against the previous reproduction", res.GateWarnings)
	}
	w := res.GateWarnings[0]
	for _, want := range []string{"gates.knn_top1.max_drop_vs_previous 0.5 is smaller than the spread", "cell dcl: standard deviation 1 over 3 seeds", "allow at least 1.5"} {
		if !strings.Contains(w, want) {
			t.Errorf("warning %q lacks %q", w, want)
		}
	}
	if report := markdown(res, nil); !strings.Contains(report, "- **Warning**: "+w) {
		t.Errorf("the report does not print the warning:\n%s", report)
	}
}
