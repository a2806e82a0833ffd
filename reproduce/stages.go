package reproduce

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/dcl-beam/dcl-beam/internal/storage"
)

// StageKind is a kind of stage, as --rerun names it.
type StageKind string

// The kinds of stages. Training includes the random-init baseline's initial checkpoint.
const (
	StagePreprocess StageKind = "preprocess"
	StageTrain      StageKind = "train"
	StageEmbed      StageKind = "embed"
	StageKNN        StageKind = "knn"
	StageLinear     StageKind = "linear"
	StageNPC        StageKind = "npc"
)

// stageKinds are the kinds in the order a reproduction runs them; stageGroups are the other
// names --rerun takes.
var (
	stageKinds  = []StageKind{StagePreprocess, StageTrain, StageEmbed, StageKNN, StageLinear, StageNPC}
	stageGroups = map[string][]StageKind{
		"evaluate": {StageEmbed, StageKNN, StageLinear, StageNPC},
		"all":      stageKinds,
	}
)

// StageNames lists what --rerun accepts.
func StageNames() []string {
	var names []string
	for _, k := range stageKinds {
		names = append(names, string(k))
	}
	return append(names, "evaluate", "all")
}

// ParseStages reads a comma-separated list of stage kinds and groups (--rerun): e.g.
// "train,evaluate" or "all". The empty string is no stage.
func ParseStages(s string) ([]StageKind, error) {
	var out []StageKind
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		switch {
		case name == "" && strings.TrimSpace(s) == "":
			return nil, nil
		case slices.Contains(stageKinds, StageKind(name)):
			out = append(out, StageKind(name))
		case stageGroups[name] != nil:
			out = append(out, stageGroups[name]...)
		default:
			return nil, fmt.Errorf("unknown stage %q: want a comma-separated list of %s", name, strings.Join(StageNames(), ", "))
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// LedgerName is the run directory's record of its stages (stages.json): which code version
// completed each, and which were redone since the last complete reproduction, so that a
// killed re-run is finished by the next call instead of leaving dependent outputs computed
// from the old ones.
const LedgerName = "stages.json"

// ledger is stages.json. Every stage that starts gets the next sequence number; the stages
// numbered above CompleteSeq were (re)started since the last reproduction that completed,
// and everything that depends on one of them must be recomputed from it, however often
// the run is interrupted. Stages run in an order where a stage starts after every stage it
// depends on has finished, so a dependent numbered below its dependency is out of date.
type ledger struct {
	Seq         int                     `json:"seq"`
	CompleteSeq int                     `json:"complete_seq"`
	Stages      map[string]*ledgerEntry `json:"stages"`
	// Reporting is the history file of the reproduction whose report phase began and has not
	// been recorded complete here: once that file is there, the reproduction is complete (its
	// history entry is its last output), whatever stopped the call before this record.
	Reporting string `json:"reporting,omitempty"`
}

type ledgerEntry struct {
	Seq   int        `json:"seq"`
	Phase stagePhase `json:"phase"`
	// CodeVersion is the version of the program that last finished the stage.
	CodeVersion string    `json:"code_version,omitempty"`
	Finished    time.Time `json:"finished,omitzero"`
	// Digest identifies the output it finished with (stageSpec.digest), where it has one.
	Digest string `json:"digest,omitempty"`
}

// stagePhase is how far a started stage got: its earlier outputs may still be there while it
// is started, are gone once it is cleared, and its new ones are complete once finished.
type stagePhase string

const (
	phaseStarted  stagePhase = "started"
	phaseCleared  stagePhase = "cleared"
	phaseFinished stagePhase = "finished"
)

// gen is what a stage tells the stages that depend on it: 0 when its output is unchanged
// since the last complete reproduction, else the sequence number at which it was redone.
type gen int

func loadLedger(ctx context.Context, out string) (*ledger, error) {
	l := &ledger{Stages: map[string]*ledgerEntry{}}
	p := storage.Join(out, LedgerName)
	ok, err := storage.Exists(ctx, p)
	if err != nil || !ok {
		return l, err
	}
	if err := storage.LoadJSON(ctx, p, l); err != nil {
		return nil, fmt.Errorf("%w (dcl writes this file; remove it to take every complete output as current)", err)
	}
	if l.Stages == nil {
		l.Stages = map[string]*ledgerEntry{}
	}
	return l, nil
}

// outcome is what a stage's outputs say before it runs.
type outcome struct {
	complete bool
	// stale says why outputs that look complete must be recomputed (other settings); "" if
	// they need not be.
	stale string
	// version is the code version the output records, where it records one (the shards'
	// manifests); the ledger's is used otherwise.
	version string
}

// stageSpec is one stage of a reproduction.
type stageSpec struct {
	kind StageKind
	name string
	// up is the newest gen among the stages it depends on.
	up   gen
	done func() (outcome, error)
	// clear removes its earlier outputs before a fresh start, the file that marks them
	// complete first; nil when do replaces them itself.
	clear func() error
	do    func() error
	// images, when set, is called after do: the images the stage processed (through the
	// encoder, or classified), for its rate in the stage times (StageTime).
	images func() int64
	// writes is about how many bytes the stage writes (0: not estimated), for --plan.
	writes int64
	// A finished stage whose output was removed since (to save disk, or on another machine
	// that continues from the run directory's small files) is handled by these, where set:
	// needed reports whether a stage that reads the output must still run (no: the stage is
	// skipped); digest identifies the output (its shards' checksums), and an output made again
	// that comes out identical counts as the old one, so nothing that depends on it is redone.
	needed func() (bool, error)
	digest func() (string, error)
}

// StageTime is how long a stage that ran took, and how many images a second it processed
// where it processes images (training: both views of each pair through the network; embed:
// images through the encoder; knn: test images classified). Skipped stages have none.
type StageTime struct {
	Stage      string   `json:"stage"`
	Seconds    float64  `json:"seconds"`
	ImagesPerS *float64 `json:"images_per_s"`
	Images     int64    `json:"images,omitempty"`
}

// stage runs s, or skips it, and records which and why. It returns the gen its dependents
// get.
func (r *runner) stage(ctx context.Context, s stageSpec) (gen, error) {
	st, g, err := r.beginStage(ctx, s)
	if st == nil || err != nil {
		return g, err
	}
	if err := s.do(); err != nil {
		return 0, fmt.Errorf("%s: %w", s.name, err)
	}
	return r.endStage(ctx, st)
}

// startedStage is a stage that runs, its earlier outputs cleared where it starts afresh,
// before its work (stageSpec.do).
type startedStage struct {
	s      stageSpec
	seq    int
	t0     time.Time
	reason string
}

// beginStage decides whether s runs, and records which and why: a stage that is skipped, or
// only planned, or made again because its output was removed, is done with, and nil comes
// back with the gen its dependents get; one that runs comes back started, its earlier
// outputs cleared where it starts afresh, for its work and then endStage.
func (r *runner) beginStage(ctx context.Context, s stageSpec) (*startedStage, gen, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	forced := s.up > 0 || r.rerun[s.kind] || slices.Contains(r.opts.RerunStages, s.name)
	o, err := s.done()
	if err != nil {
		if !forced {
			return nil, 0, fmt.Errorf("%s: %w", s.name, err)
		}
		// It is recomputed anyway: an unreadable old output is no reason to stop.
		r.log.Warn("the earlier output is unreadable; it is recomputed", "stage", s.name, "error", err)
		o = outcome{}
	}
	e := r.ledger.Stages[s.name]
	if removed := !o.complete && o.stale == "" && e != nil && e.Phase == phaseFinished; removed {
		// Finished, and skipped if its output were there: its output was removed since.
		if run, _, _ := r.decide(s, outcome{complete: true, version: e.CodeVersion}, e); !run {
			if g, done, err := r.removedOutput(ctx, s, e); done || err != nil {
				return nil, g, err
			}
		}
	}
	run, fresh, reason := r.decide(s, o, e)
	if !run {
		g, err := r.skip(ctx, s, e, reason)
		return nil, g, err
	}
	r.ledger.Seq++
	seq := r.ledger.Seq
	r.ranNow[gen(seq)] = s.name
	if r.plan {
		r.stages = append(r.stages, StageRecord{Name: s.name, Reason: reason, Writes: s.writes})
		return nil, gen(seq), nil
	}
	r.log.Info("stage starts", "stage", s.name, "why", reason)
	t0 := r.opts.Now()
	r.ledger.Stages[s.name] = &ledgerEntry{Seq: seq, Phase: phaseStarted}
	if err := r.mark(ctx, s.name, phaseStarted); err != nil {
		return nil, 0, err
	}
	if fresh && s.clear != nil {
		if err := s.clear(); err != nil {
			return nil, 0, fmt.Errorf("%s: removing the earlier output: %w", s.name, err)
		}
	}
	if err := r.mark(ctx, s.name, phaseCleared); err != nil {
		return nil, 0, err
	}
	return &startedStage{s: s, seq: seq, t0: t0, reason: reason}, 0, nil
}

// endStage records that a started stage's work is done: its output's digest, its phase,
// its time and its images a second.
func (r *runner) endStage(ctx context.Context, started *startedStage) (gen, error) {
	s, seq, t0, reason := started.s, started.seq, started.t0, started.reason
	if s.digest != nil {
		d, err := s.digest()
		if err != nil {
			return 0, fmt.Errorf("%s: %w", s.name, err)
		}
		r.ledger.Stages[s.name].Digest = d
	}
	if err := r.mark(ctx, s.name, phaseFinished); err != nil {
		return 0, err
	}
	wall := r.opts.Now().Sub(t0)
	st := StageTime{Stage: s.name, Seconds: wall.Seconds()}
	if s.images != nil {
		if st.Images = s.images(); st.Images > 0 && wall > 0 {
			rate := float64(st.Images) / wall.Seconds()
			st.ImagesPerS = &rate
		}
	}
	r.times = append(r.times, st)
	if st.ImagesPerS != nil {
		r.log.Info("stage done", "stage", s.name, "wall", wall.Round(time.Millisecond), "images_per_s", math.Round(*st.ImagesPerS))
	} else {
		r.log.Info("stage done", "stage", s.name, "wall", wall.Round(time.Millisecond))
	}
	if note := r.packNotes[s.name]; note != "" {
		reason += "; " + note
	}
	r.stages = append(r.stages, StageRecord{Name: s.name, Wall: wall.Round(time.Millisecond).String(), Reason: reason})
	return gen(seq), nil
}

// skip records a stage that does not run, and returns the gen its dependents get: 0 when
// its output is that of the last complete reproduction, else when it was redone.
func (r *runner) skip(ctx context.Context, s stageSpec, e *ledgerEntry, reason string) (gen, error) {
	r.log.Info("stage skipped", "stage", s.name, "why", reason)
	r.stages = append(r.stages, StageRecord{Name: s.name, Skipped: true, Reason: reason})
	if e == nil || e.Seq <= r.ledger.CompleteSeq {
		return 0, nil
	}
	if e.Phase != phaseFinished { // it finished, but the call was killed before it said so
		if err := r.mark(ctx, s.name, phaseFinished); err != nil {
			return 0, err
		}
	}
	return gen(e.Seq), nil
}

// removedOutput handles a finished stage whose output was removed, where nothing else would
// make it run: skipped while nothing needs it, or made again, and then the same stage as
// before when its output comes out identical. done is false when the stage runs as usual.
func (r *runner) removedOutput(ctx context.Context, s stageSpec, e *ledgerEntry) (g gen, done bool, err error) {
	if s.needed != nil {
		need, err := s.needed()
		if err != nil {
			return 0, true, fmt.Errorf("%s: %w", s.name, err)
		}
		if !need {
			g, err := r.skip(ctx, s, e, "finished, its output since removed; every stage that reads it is complete")
			return g, true, err
		}
	}
	if s.digest == nil || e.Digest == "" {
		return 0, false, nil
	}
	if r.plan {
		r.stages = append(r.stages, StageRecord{Name: s.name, Reason: "finished, its output since removed: made again, and if it comes out identical nothing after it is redone"})
		return r.planGen(e), true, nil
	}
	r.log.Info("stage starts", "stage", s.name, "why", "its output was removed: made again")
	t0 := r.opts.Now()
	if err := s.do(); err != nil {
		return 0, true, fmt.Errorf("%s: %w", s.name, err)
	}
	d, err := s.digest()
	if err != nil {
		return 0, true, fmt.Errorf("%s: %w", s.name, err)
	}
	wall := r.opts.Now().Sub(t0).Round(time.Millisecond)
	if d == e.Digest {
		r.log.Info("stage done", "stage", s.name, "wall", wall, "output", "identical to the removed one")
		r.stages = append(r.stages, StageRecord{Name: s.name, Wall: wall.String(),
			Reason: "its output was removed: made again, identical to the one the stages after it used"})
		return r.planGen(e), true, nil
	}
	// Another output: it counts as redone, and what depends on it is recomputed.
	r.ledger.Seq++
	r.ranNow[gen(r.ledger.Seq)] = s.name
	r.ledger.Stages[s.name] = &ledgerEntry{Seq: r.ledger.Seq, Phase: phaseFinished, CodeVersion: r.opts.CodeVersion,
		Finished: r.opts.Now().UTC(), Digest: d}
	if err := r.saveLedger(ctx); err != nil {
		return 0, true, err
	}
	r.log.Info("stage done", "stage", s.name, "wall", wall, "output", "not the removed one")
	r.stages = append(r.stages, StageRecord{Name: s.name, Wall: wall.String(),
		Reason: "its output was removed: made again, and it differs from the one the stages after it used"})
	return gen(r.ledger.Seq), true, nil
}

// planGen is the gen a stage's dependents get from it as it stands in the ledger.
func (r *runner) planGen(e *ledgerEntry) gen {
	if e.Seq <= r.ledger.CompleteSeq {
		return 0
	}
	return gen(e.Seq)
}

// decide says whether a stage runs, whether it starts afresh (its earlier outputs removed)
// or continues what is there, and why.
func (r *runner) decide(s stageSpec, o outcome, e *ledgerEntry) (run, fresh bool, reason string) {
	if o.complete && o.stale == "" && r.opts.RerunOnCodeChange {
		made := o.version
		if made == "" && e != nil {
			made = e.CodeVersion
		}
		if made != r.opts.CodeVersion {
			o.stale = fmt.Sprintf("made by dcl %s, this is dcl %s (--rerun-on-code-change)", cmp.Or(made, "of an unrecorded version"), r.opts.CodeVersion)
		}
	}
	pending := e != nil && e.Seq > r.ledger.CompleteSeq
	switch {
	case o.stale != "":
		return true, true, o.stale
	case pending && int(s.up) <= e.Seq:
		// Restarted by a call that did not complete, after everything it depends on.
		switch {
		case o.complete && e.Phase != phaseStarted:
			return false, false, "already redone by an earlier call that did not complete"
		case e.Phase == phaseCleared:
			return true, false, "continuing what an earlier call that did not complete started"
		}
		return true, true, "an earlier call that did not complete had begun to redo it"
	case s.up > 0:
		return true, true, r.upstreamReason(s.up)
	case r.rerun[s.kind]:
		return true, true, "--rerun=" + string(s.kind)
	case slices.Contains(r.opts.RerunStages, s.name):
		return true, true, fmt.Sprintf("--rerun=%q", s.name)
	case o.complete:
		return false, false, "complete"
	}
	return true, false, "no complete output"
}

// upstreamReason says which stage a stage depends on made it run.
func (r *runner) upstreamReason(up gen) string {
	if name, ok := r.ranNow[up]; ok {
		if r.plan {
			return "it depends on " + name + ", which would run"
		}
		return "it depends on " + name + ", which ran in this call"
	}
	for name, e := range r.ledger.Stages {
		if e.Seq == int(up) {
			return "it depends on " + name + ", redone since the last complete reproduction"
		}
	}
	return "a stage it depends on was redone"
}

// mark records a stage's phase in the ledger (nothing in a plan).
func (r *runner) mark(ctx context.Context, name string, phase stagePhase) error {
	if r.plan {
		return nil
	}
	e := r.ledger.Stages[name]
	e.Phase = phase
	if phase == phaseFinished {
		e.CodeVersion, e.Finished = r.opts.CodeVersion, r.opts.Now().UTC()
	}
	return r.saveLedger(ctx)
}

func (r *runner) saveLedger(ctx context.Context) error {
	return storage.SaveJSON(ctx, r.path(LedgerName), r.ledger)
}

// completeLedger records that every stage's output is now consistent with what it depends
// on: the next call starts from a clean slate.
func (r *runner) completeLedger(ctx context.Context) error {
	r.ledger.CompleteSeq, r.ledger.Reporting = r.ledger.Seq, ""
	return r.saveLedger(ctx)
}
