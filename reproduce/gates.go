package reproduce

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"time"
)

// ReproductionInfo names a reproduction of the history.
type ReproductionInfo struct {
	File              string    `json:"file"`
	Time              time.Time `json:"time"`
	CodeVersion       string    `json:"code_version"`
	ConfigFingerprint string    `json:"config_fingerprint"`
}

// Change is a run's figure now, beside the previous reproduction's and the paper's.
type Change struct {
	Run      string   `json:"run"`
	Metric   string   `json:"metric"`
	Value    float64  `json:"value"`
	Previous *float64 `json:"previous,omitempty"`
	Paper    *float64 `json:"paper,omitempty"`
}

// Gate references: what a figure is compared with.
const (
	VsPrevious = "previous"
	VsPaper    = "paper"
)

// GateCheck is one gate applied to one run.
type GateCheck struct {
	Run     string `json:"run"`
	Metric  string `json:"metric"`
	Against string `json:"against"` // VsPrevious or VsPaper
	// Reference is the previous reproduction's figure or the paper's.
	Reference float64 `json:"reference"`
	Value     float64 `json:"value"`
	// Drop is how much worse Value is than Reference (negative: better), and MaxDrop how
	// much the gate allows.
	Drop    float64 `json:"drop"`
	MaxDrop float64 `json:"max_drop"`
	Failed  bool    `json:"failed,omitempty"`
}

// dropTolerance absorbs rounding in figures that are equal: a gate of 0 fails on a real
// drop, not on the last bit of a float.
const dropTolerance = 1e-9

func (g GateCheck) String() string {
	m, _ := lookupMetric(g.Metric)
	ref := "the previous reproduction's"
	if g.Against == VsPaper {
		ref = "the paper's"
	}
	dir := "below"
	if !m.HigherIsBetter {
		dir = "above"
	}
	verdict := "passed"
	if g.Failed {
		verdict = "FAILED"
	}
	return fmt.Sprintf("run %s: %s %s is %s %s %s %s (largest drop allowed %s): %s", g.Run, g.Metric,
		num(g.Value), num(g.Drop), dir, ref, num(g.Reference), num(g.MaxDrop), verdict)
}

// FailedGates lists the gates this reproduction failed.
func (res *Results) FailedGates() []GateCheck {
	var out []GateCheck
	for _, g := range res.Gates {
		if g.Failed {
			out = append(out, g)
		}
	}
	return out
}

// compare sets the reproduction's changes since prev (nil: the first reproduction) and
// applies the config's gates.
func compare(cfg *Config, res *Results, prev *Reproduction) {
	if prev != nil {
		res.Previous = &ReproductionInfo{File: prev.File, Time: prev.Time, CodeVersion: prev.CodeVersion, ConfigFingerprint: prev.ConfigFingerprint}
	}
	res.Changes, res.Gates = nil, nil
	eachFigure(res, func(run *RunResult, m Metric, v float64) {
		c := Change{Run: run.Config.Name, Metric: m.Name, Value: v}
		if prev != nil {
			if p, ok := prev.Value(c.Run, m.Name); ok {
				c.Previous = &p
			}
		}
		if p, ok := m.paperOf(run.Paper); ok {
			c.Paper = &p
		}
		res.Changes = append(res.Changes, c)
		gate, ok := cfg.Gates[m.Name]
		if !ok {
			return
		}
		for _, b := range []struct {
			against string
			max     *float64
			ref     *float64
		}{{VsPrevious, gate.MaxDropVsPrevious, c.Previous}, {VsPaper, gate.MaxDropVsPaper, c.Paper}} {
			if b.max == nil || b.ref == nil {
				continue
			}
			d := m.drop(*b.ref, v)
			res.Gates = append(res.Gates, GateCheck{Run: c.Run, Metric: m.Name, Against: b.against,
				Reference: *b.ref, Value: v, Drop: d, MaxDrop: *b.max, Failed: !(d <= *b.max+dropTolerance)}) // NaN fails
		}
	})
	res.GateWarnings = gateWarnings(cfg, res)
}

// gateWarnings are the gates that one seed's noise alone can fail: a bound smaller than the
// standard deviation over the seeds of a cell that the same reproduction measures. A gate
// checks each seed's figure, and two reproductions of one seed differ by about √2 times that
// spread: such a gate fails on noise, not on a change.
func gateWarnings(cfg *Config, res *Results) []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(cfg.Gates)) {
		g := cfg.Gates[name]
		var widest CellResult
		var sd float64
		for _, c := range res.Cells {
			if s, ok := c.Metrics[name]; ok && s.N > 1 && s.SD > sd {
				widest, sd = c, s.SD
			}
		}
		if sd == 0 {
			continue
		}
		for _, b := range []struct {
			key string
			max *float64
		}{{"max_drop_vs_previous", g.MaxDropVsPrevious}, {"max_drop_vs_paper", g.MaxDropVsPaper}} {
			if b.max != nil && *b.max < sd {
				out = append(out, fmt.Sprintf("gates.%s.%s %s is smaller than the spread over the seeds that this reproduction measures "+
					"(cell %s: standard deviation %s over %d seeds): one seed's noise alone can fail it; allow at least %s",
					name, b.key, num(*b.max), widest.Name, num(sd), widest.Metrics[name].N, num(math.Ceil(math.Sqrt2*sd*10)/10)))
			}
		}
	}
	return out
}

// num formats a figure for messages and tables: as many digits as it needs, at most four
// decimals.
func num(v float64) string {
	return strconv.FormatFloat(math.Round(v*1e4)/1e4, 'f', -1, 64)
}
