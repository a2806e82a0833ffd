package reproduce

import (
	"fmt"
	"math"
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
}

// num formats a figure for messages and tables: as many digits as it needs, at most four
// decimals.
func num(v float64) string {
	return strconv.FormatFloat(math.Round(v*1e4)/1e4, 'f', -1, 64)
}
