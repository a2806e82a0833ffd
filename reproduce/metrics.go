package reproduce

import (
	"slices"
	"strings"
)

// Metric is one figure a reproduction measures per run: what the history records, the
// gates check and the report compares. metrics is the one list of them.
type Metric struct {
	Name        string
	Description string
	// HigherIsBetter says which way is a drop: accuracy falls, a loss rises.
	HigherIsBetter bool
	// Accuracy says the figure is a percentage of test images: its plots span at least
	// figures.AccuracySpan points within 0–100.
	Accuracy bool
	// of reads the figure from a run's results; false where the run has none.
	of func(*RunResult) (float64, bool)
	// paper reads the paper's figure (0: not published); nil where the paper has none.
	paper func(PaperFigures) float64
	// evaluation names the config's evaluation that measures it; "" for training's figures.
	evaluation string
}

// measured reports whether a config's evaluations measure the metric.
func (m Metric) measured(e EvaluateConfig) bool {
	return m.evaluation == "" || e.Has(m.evaluation)
}

var metrics = []Metric{
	{Name: "knn_top1", Description: "kNN top-1 accuracy (%)", HigherIsBetter: true, Accuracy: true,
		of: func(r *RunResult) (float64, bool) {
			if r.KNN == nil {
				return 0, false
			}
			return r.KNN.Top1, true
		},
		paper: func(p PaperFigures) float64 { return p.KNNTop1 }, evaluation: "knn"},
	{Name: "knn_top5", Description: "kNN top-5 accuracy (%)", HigherIsBetter: true, Accuracy: true,
		of: func(r *RunResult) (float64, bool) {
			if r.KNN == nil {
				return 0, false
			}
			return r.KNN.Top5, true
		}, evaluation: "knn"},
	{Name: "linear_top1", Description: "linear-probe top-1 accuracy (%)", HigherIsBetter: true, Accuracy: true,
		of: func(r *RunResult) (float64, bool) {
			if r.Linear == nil {
				return 0, false
			}
			return r.Linear.Top1, true
		},
		paper: func(p PaperFigures) float64 { return p.LinearTop1 }, evaluation: "linear"},
	{Name: "linear_top5", Description: "linear-probe top-5 accuracy (%)", HigherIsBetter: true, Accuracy: true,
		of: func(r *RunResult) (float64, bool) {
			if r.Linear == nil {
				return 0, false
			}
			return r.Linear.Top5, true
		}, evaluation: "linear"},
	{Name: "train_loss", Description: "training loss of the last step", HigherIsBetter: false,
		of: func(r *RunResult) (float64, bool) {
			if r.Train == nil {
				return 0, false
			}
			return r.Train.Loss, true
		}},
}

// trendMetrics are plotted against time whether or not a gate names them: the paper's two
// accuracies.
var trendMetrics = []string{"knn_top1", "linear_top1"}

// MetricNames lists the metrics, for messages and docs.
func MetricNames() []string {
	names := make([]string, len(metrics))
	for i, m := range metrics {
		names[i] = m.Name
	}
	return names
}

func lookupMetric(name string) (Metric, bool) {
	i := slices.IndexFunc(metrics, func(m Metric) bool { return m.Name == name })
	if i < 0 {
		return Metric{}, false
	}
	return metrics[i], true
}

// paperOf returns the paper's figure of metric m for a run, and whether there is one.
func (m Metric) paperOf(p PaperFigures) (float64, bool) {
	if m.paper == nil {
		return 0, false
	}
	v := m.paper(p)
	return v, v != 0
}

// drop is how much worse now is than ref, in the metric's unit: positive when it got worse.
func (m Metric) drop(ref, now float64) float64 {
	if m.HigherIsBetter {
		return ref - now
	}
	return now - ref
}

func metricsWithPaper() string {
	var names []string
	for _, m := range metrics {
		if m.paper != nil {
			names = append(names, m.Name)
		}
	}
	return strings.Join(names, ", ")
}

// eachFigure calls visit with every metric of every run of res that has it, runs in order,
// metrics in the order of metrics.
func eachFigure(res *Results, visit func(run *RunResult, m Metric, value float64)) {
	for i := range res.Runs {
		run := &res.Runs[i]
		for _, m := range metrics {
			if v, ok := m.of(run); ok {
				visit(run, m, v)
			}
		}
	}
}
