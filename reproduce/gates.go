package reproduce

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
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

// compare sets the reproduction's changes since prev (nil: none to compare with, the first
// reproduction or, with res.Unchanged, the only one) and applies the config's gates, naming
// each bound it could not apply and why.
func compare(cfg *Config, res *Results, prev *Reproduction) {
	if prev != nil {
		res.Previous = &ReproductionInfo{File: prev.File, Time: prev.Time, CodeVersion: prev.CodeVersion, ConfigFingerprint: prev.ConfigFingerprint}
	}
	res.Changes, res.Gates = nil, nil
	// unchecked holds, per gate bound, the runs it could not be applied to.
	unchecked := map[gateBound][]string{}
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
			if b.max == nil {
				continue
			}
			if b.ref == nil {
				k := gateBound{m.Name, b.against}
				unchecked[k] = append(unchecked[k], c.Run)
				continue
			}
			d := m.drop(*b.ref, v)
			res.Gates = append(res.Gates, GateCheck{Run: c.Run, Metric: m.Name, Against: b.against,
				Reference: *b.ref, Value: v, Drop: d, MaxDrop: *b.max, Failed: !(d <= *b.max+dropTolerance)}) // NaN fails
		}
	})
	res.GateWarnings = gateWarnings(cfg, res)
	res.GatesNotChecked = notChecked(unchecked, res, prev)
}

// gateBound is one bound of a config's gate: a metric's against VsPrevious or VsPaper.
type gateBound struct{ metric, against string }

// notChecked says, for each gate bound that some runs could not be checked against, which
// runs and why: the reference the bound needs is missing. A gate is a check of a change, and
// where there is nothing to compare with the check is not made; a reproduction that passes
// with none made must say so, or a scheduler's exit status 0 reads as a pass.
func notChecked(unchecked map[gateBound][]string, res *Results, prev *Reproduction) []string {
	keys := slices.SortedFunc(maps.Keys(unchecked), func(a, b gateBound) int {
		// Against the previous reproduction first, as a gate's checks come.
		order := func(against string) int { return map[string]int{VsPrevious: 0, VsPaper: 1}[against] }
		return cmp.Or(strings.Compare(a.metric, b.metric), cmp.Compare(order(a.against), order(b.against)))
	})
	var out []string
	for _, k := range keys {
		var why string
		switch {
		case k.against == VsPaper:
			why = "the paper gives no figure for them"
		case prev == nil && res.Unchanged:
			why = "this call ran no stage and repeats the only reproduction in the history, so there is none before it to compare with " +
				"(a gate against the previous reproduction needs two reproductions in the history; a rerun that changes nothing is not a second one)"
		case prev == nil:
			why = "this is the first reproduction in the run directory's history, so there is none before it to compare with " +
				"(the next reproduction is checked against this one)"
		default:
			why = "the previous reproduction has no figure of them"
		}
		runs := "run "
		if len(unchecked[k]) > 1 {
			runs = "runs "
		}
		out = append(out, fmt.Sprintf("gates.%s.%s not checked (%s%s): %s", k.metric, boundKey(k.against),
			runs, strings.Join(unchecked[k], ", "), why))
	}
	return out
}

// boundKey is the config key of a gate's bound against a reference.
func boundKey(against string) string { return "max_drop_vs_" + against }

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
