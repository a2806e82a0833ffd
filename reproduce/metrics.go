package reproduce

import (
	"slices"
	"strings"

	"github.com/dcl-beam/dcl-beam/pipelines"
)

// Metric is one figure a reproduction measures per run: what the history records, the
// gates check and the report compares. The training's loss is the reproduction's own; every
// other is declared by the evaluation that measures it (pipelines.EncoderEvaluation.Metrics).
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

// trainLoss is the training's own figure.
var trainLoss = Metric{Name: "train_loss", Description: "training loss of the last step", HigherIsBetter: false,
	of: func(r *RunResult) (float64, bool) {
		if r.Train == nil {
			return 0, false
		}
		return r.Train.Loss, true
	}}

// paperFigures are the metrics the paper publishes, as a run's paper figures give them.
var paperFigures = map[string]func(PaperFigures) float64{
	"knn_top1":    func(p PaperFigures) float64 { return p.KNNTop1 },
	"linear_top1": func(p PaperFigures) float64 { return p.LinearTop1 },
}

// metrics are every metric: those of each registered evaluation of an encoder, in
// registration order, then the training's.
func metrics() []Metric {
	var out []Metric
	for _, e := range pipelines.EncoderEvaluations() {
		for _, m := range e.Encoder.Metrics {
			out = append(out, Metric{Name: m.Name, Description: m.Description, HigherIsBetter: m.HigherIsBetter, Accuracy: m.Accuracy,
				of: func(r *RunResult) (float64, bool) {
					res, ok := r.result(e.Name)
					if !ok {
						return 0, false
					}
					return m.Of(res)
				},
				paper: paperFigures[m.Name], evaluation: e.Name})
		}
	}
	return append(out, trainLoss)
}

// trendMetrics are plotted against time whether or not a gate names them: the paper's two
// accuracies.
var trendMetrics = []string{"knn_top1", "linear_top1"}

// MetricNames lists the metrics, for messages and docs.
func MetricNames() []string {
	all := metrics()
	names := make([]string, len(all))
	for i, m := range all {
		names[i] = m.Name
	}
	return names
}

func lookupMetric(name string) (Metric, bool) {
	all := metrics()
	i := slices.IndexFunc(all, func(m Metric) bool { return m.Name == name })
	if i < 0 {
		return Metric{}, false
	}
	return all[i], true
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
	for _, m := range metrics() {
		if m.paper != nil {
			names = append(names, m.Name)
		}
	}
	return strings.Join(names, ", ")
}

// eachFigure calls visit with every metric of every run of res that has it, runs in order,
// metrics in the order of metrics.
func eachFigure(res *Results, visit func(run *RunResult, m Metric, value float64)) {
	all := metrics()
	for i := range res.Runs {
		run := &res.Runs[i]
		for _, m := range all {
			if v, ok := m.of(run); ok {
				visit(run, m, v)
			}
		}
	}
}
