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

// A gate bound with nothing to compare with is not checked, and the results, the report and
// the command say which and why, rather than passing in silence: on the first reproduction,
// on a rerun that changed nothing with one reproduction in the history, for a run the
// previous reproduction lacks, and against the paper where it gives no figure.
func TestGatesWithNothingToCompareSaySo(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	run := func(name string, paper float64) RunResult {
		r := RunResult{Config: RunConfig{Name: name}, Paper: PaperFigures{KNNTop1: paper}}
		r.KNN = &analysis.KNNResult{Top1: 80}
		return r
	}
	previous := &Reproduction{Rows: []HistoryRow{{Run: "a", Metric: "knn_top1", Value: 80}}}
	vsPrevious := map[string]Gate{"knn_top1": {MaxDropVsPrevious: f(1)}}
	tests := []struct {
		name      string
		gates     map[string]Gate
		runs      []RunResult
		prev      *Reproduction
		unchanged bool
		checked   int
		want      []string // the lines of GatesNotChecked, each as its start and its reason
	}{
		{"first reproduction", vsPrevious, []RunResult{run("a", 0), run("b", 0)}, nil, false, 0,
			[]string{"gates.knn_top1.max_drop_vs_previous not checked (runs a, b): this is the first reproduction"}},
		{"a rerun that changed nothing, one reproduction in the history", vsPrevious, []RunResult{run("a", 0)}, nil, true, 0,
			[]string{"gates.knn_top1.max_drop_vs_previous not checked (run a): this call ran no stage and repeats the only reproduction"}},
		{"a run new since the previous reproduction", vsPrevious, []RunResult{run("a", 0), run("b", 0)}, previous, false, 1,
			[]string{"gates.knn_top1.max_drop_vs_previous not checked (run b): the previous reproduction has no figure of them"}},
		{"no paper figure", map[string]Gate{"knn_top1": {MaxDropVsPrevious: f(1), MaxDropVsPaper: f(2)}}, []RunResult{run("a", 0)}, nil, false, 0,
			[]string{"gates.knn_top1.max_drop_vs_previous not checked (run a): this is the first",
				"gates.knn_top1.max_drop_vs_paper not checked (run a): the paper gives no figure"}},
		{"everything checked", map[string]Gate{"knn_top1": {MaxDropVsPrevious: f(1), MaxDropVsPaper: f(2)}}, []RunResult{run("a", 81)}, previous, false, 2, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := &Results{Runs: tt.runs, Unchanged: tt.unchanged}
			compare(&Config{Gates: tt.gates}, res, tt.prev)
			if len(res.Gates) != tt.checked {
				t.Errorf("%d gates checked, want %d", len(res.Gates), tt.checked)
			}
			if len(res.GatesNotChecked) != len(tt.want) {
				t.Fatalf("not checked: %q, want %d lines starting %q", res.GatesNotChecked, len(tt.want), tt.want)
			}
			report := markdown(res, nil)
			for i, want := range tt.want {
				if !strings.HasPrefix(res.GatesNotChecked[i], want) {
					t.Errorf("not checked[%d] = %q, want it to start %q", i, res.GatesNotChecked[i], want)
				}
				if !strings.Contains(report, "- **Not checked**: "+res.GatesNotChecked[i]) {
					t.Errorf("the report does not say %q:\n%s", res.GatesNotChecked[i], report)
				}
			}
			if none := strings.Contains(report, "Gates: **none checked**"); none != (tt.checked == 0 && len(tt.want) > 0) {
				t.Errorf("the report says none checked: %v, want %v:\n%s", none, !none, report)
			}
		})
	}
}
