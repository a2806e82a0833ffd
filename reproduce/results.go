package reproduce

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/dcl-beam/dcl-beam/analysis"
	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/trainstep"
)

// Results is everything a reproduction measured, with the configuration that produced it:
// results.json.
type Results struct {
	Experiment  string           `json:"experiment"`
	Description string           `json:"description,omitempty"`
	Paper       string           `json:"paper,omitempty"`
	CodeVersion string           `json:"code_version,omitempty"`
	Dataset     DatasetConfig    `json:"dataset"`
	Preprocess  PreprocessConfig `json:"preprocess"`
	Evaluate    EvaluateConfig   `json:"evaluate"`
	Runs        []RunResult      `json:"runs"`
	// Cells are the runs grouped by cell (the runs of one setting that differ only by their
	// training seed), with every figure's mean and spread over the seeds; Comparisons are
	// every cell against the InfoNCE cell of the same settings, by analysis.SeedRule.
	Cells       []CellResult     `json:"cells,omitempty"`
	Comparisons []Comparison     `json:"comparisons,omitempty"`
	Baselines   []BaselineResult `json:"baselines,omitempty"`
	// Departures are the config's departures from the paper's recipe, by setting.
	Departures map[string]string `json:"departures,omitempty"`
	// Overrides are the --set KEY=VALUE overrides the config was read with.
	Overrides []string `json:"overrides,omitempty"`
	// ToolkitDepartures are the recipe choices of the toolkit's code that apply to the
	// config (Config.ToolkitDepartures), by setting.
	ToolkitDepartures map[string]string `json:"toolkit_departures,omitempty"`
	// Machine is where the reproduction ran: CPU model, cores, and the GPU where training
	// used one, for the wall times.
	Machine string `json:"machine,omitempty"`
	// Stages lists what this call ran and what it found complete.
	Stages []StageRecord `json:"stages"`
	Wall   string        `json:"wall"`

	// ConfigFingerprint is Config.Fingerprint; Time is when the reproduction started (UTC).
	ConfigFingerprint string    `json:"config_fingerprint"`
	Time              time.Time `json:"time"`
	// HistoryFile is this reproduction's file in history/; Previous is the reproduction
	// before it there (nil for the first).
	HistoryFile string            `json:"history_file,omitempty"`
	Previous    *ReproductionInfo `json:"previous,omitempty"`
	// Unchanged says that the call ran no stage and found the figures of HistoryFile, the
	// last reproduction, with the same config: it added no history entry.
	Unchanged bool `json:"unchanged,omitempty"`
	// GateWarnings name the gates whose bound is smaller than the spread over the seeds that
	// the reproduction measures: one seed's noise alone can fail them.
	GateWarnings []string `json:"gate_warnings,omitempty"`
	// GatesNotChecked name the gates' bounds that could not be applied to some runs, for want
	// of a figure to compare with, and why: with every bound among them, no gate was checked.
	GatesNotChecked []string `json:"gates_not_checked,omitempty"`
	// Changes are every run's figures beside the previous reproduction's and the paper's;
	// Gates the config's gates applied to them.
	Changes []Change    `json:"changes,omitempty"`
	Gates   []GateCheck `json:"gates,omitempty"`
}

// StageRecord is one stage of one call: skipped or run (with its wall time), and why.
type StageRecord struct {
	Name    string `json:"name"`
	Skipped bool   `json:"skipped,omitempty"`
	Wall    string `json:"wall,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// Writes is about how many bytes the stage would write (--plan; 0: not estimated).
	Writes int64 `json:"writes,omitempty"`
	// Refused says that a run would stop at this stage with Reason (--plan): the stages
	// after it are not decided.
	Refused bool `json:"refused,omitempty"`
}

// Evaluation holds the evaluations of one encoder (nil where the config asks for none).
type Evaluation struct {
	KNN    *analysis.KNNResult    `json:"knn,omitempty"`
	Linear *analysis.LinearResult `json:"linear,omitempty"`
	NPC    *analysis.NPCReport    `json:"npc,omitempty"`
	// Others are the results of the other evaluations the config asks for (registered in
	// package pipelines), by name: the report reads the three above.
	Others map[string]json.RawMessage `json:"others,omitempty"`
}

// RunResult is one training run: its settings, the paper's figures for it, the training
// summary and curves, and its evaluations.
type RunResult struct {
	Config RunConfig `json:"config"`
	// Cell is the cell the run belongs to (its name without the seed's suffix); results of
	// earlier versions have none, and each run is its own cell.
	Cell   string             `json:"cell,omitempty"`
	Paper  PaperFigures       `json:"paper"`
	Train  *trainstep.Summary `json:"train"`
	Curves Curves             `json:"curves"`
	Evaluation
}

// cell is the run's cell.
func (r *RunResult) cell() string { return cmp.Or(r.Cell, r.Config.Name) }

// CellResult is one cell: the runs of one setting, one per training seed.
type CellResult struct {
	Name  string   `json:"name"`
	Runs  []string `json:"runs"`
	Seeds []uint64 `json:"seeds"`
	// Metrics are the spreads of every figure the runs have, by metric name (knn_top1, …).
	Metrics map[string]analysis.Spread `json:"metrics"`
}

// Comparison is a cell against its baseline cell (InfoNCE with the same settings otherwise)
// for one metric: B's mean minus A's, with its verdict by analysis.SeedRule.
type Comparison struct {
	Cell     string `json:"cell"`
	Baseline string `json:"baseline"`
	Metric   string `json:"metric"`
	analysis.Difference
}

// BaselineResult is an encoder that was not trained: raw pixels or random weights.
type BaselineResult struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Evaluation
}

// Curves are a run's per-epoch means of its training log, and the kNN monitor's readings.
type Curves struct {
	Epoch    []float64 `json:"epoch"` // epochs completed: 1, 2, …
	Loss     []float64 `json:"loss"`
	MeanQ    []float64 `json:"mean_q"`
	KNNEpoch []float64 `json:"knn_epoch,omitempty"`
	KNNTop1  []float64 `json:"knn_top1,omitempty"`
	// LinearTop1 is the monitor's linear probe's top-1 at each of KNNEpoch, where it ran one
	// (evaluate.knn_monitor.linear).
	LinearTop1 []float64 `json:"linear_top1,omitempty"`
	// KNNBank and KNNQueries are the sizes of the monitor's sample where it drew one (0: it
	// read the full splits): its accuracies are not the full split's.
	KNNBank    int `json:"knn_bank,omitempty"`
	KNNQueries int `json:"knn_queries,omitempty"`
}

// readCurves averages the training log (train.jsonl) per epoch. Monitor lines carry
// knn_top1 and no loss.
func readCurves(ctx context.Context, logPath string) (Curves, error) {
	var c Curves
	ok, err := storage.Exists(ctx, logPath)
	if err != nil || !ok {
		return c, err
	}
	data, err := storage.ReadFile(ctx, logPath)
	if err != nil {
		return c, err
	}
	type sums struct{ loss, q, n float64 }
	perEpoch := map[int]*sums{}
	knn, linear := map[int]float64{}, map[int]float64{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for line := 1; sc.Scan(); line++ {
		var entry struct {
			Epoch      int      `json:"epoch"`
			Loss       *float64 `json:"loss"`
			MeanQ      float64  `json:"mean_q"`
			KNNTop1    *float64 `json:"knn_top1"`
			LinearTop1 *float64 `json:"linear_top1"`
			KNNBank    int      `json:"knn_bank"`
			KNNQueries int      `json:"knn_queries"`
		}
		if err := json.Unmarshal(sc.Bytes(), &entry); err != nil {
			return c, fmt.Errorf("%s line %d: %w", logPath, line, err)
		}
		switch {
		case entry.KNNTop1 != nil:
			knn[entry.Epoch] = *entry.KNNTop1
			if entry.LinearTop1 != nil {
				linear[entry.Epoch] = *entry.LinearTop1
			}
			c.KNNBank, c.KNNQueries = entry.KNNBank, entry.KNNQueries
		case entry.Loss != nil:
			s := perEpoch[entry.Epoch]
			if s == nil {
				s = &sums{}
				perEpoch[entry.Epoch] = s
			}
			s.loss += *entry.Loss
			s.q += entry.MeanQ
			s.n++
		}
	}
	if err := sc.Err(); err != nil {
		return c, fmt.Errorf("reading %s: %w", logPath, err)
	}
	for _, e := range slices.Sorted(maps.Keys(perEpoch)) {
		s := perEpoch[e]
		c.Epoch = append(c.Epoch, float64(e+1))
		c.Loss = append(c.Loss, s.loss/s.n)
		c.MeanQ = append(c.MeanQ, s.q/s.n)
	}
	for _, e := range slices.Sorted(maps.Keys(knn)) {
		c.KNNEpoch = append(c.KNNEpoch, float64(e+1))
		c.KNNTop1 = append(c.KNNTop1, knn[e])
	}
	if len(linear) == len(knn) && len(linear) > 0 {
		for _, e := range slices.Sorted(maps.Keys(linear)) {
			c.LinearTop1 = append(c.LinearTop1, linear[e])
		}
	}
	return c, nil
}
