package trainstep

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/dcl-beam/dcl-beam/gpu"
	"github.com/dcl-beam/dcl-beam/internal/progress"
)

// PackRun is one run of a pack, as Train takes it. Every run of a pack has the same backend
// (Opts.Backend).
type PackRun struct {
	Step StepConfig
	Run  RunConfig
	Opts TrainOptions
}

// PackResult is how one run of a pack ended, as Train would have returned it.
type PackResult struct {
	Summary *Summary
	Err     error
}

// TrainPacked trains runs together, each step of every run in one launch of a PackedStep,
// and returns each run's outcome in order. Each run is what Train would make of it: its own
// data order (its seed), checkpoints, log, TensorBoard file and summary, its losses and
// weights those of the run alone (bit for bit on the CPU backend), its checks and errors
// its own. The runs must keep in step: the same batch size, number of batches per epoch,
// epochs, checkpoint, monitor and max-steps intervals.
//
// A run that fails (its loss diverges, its data cannot be read) stops as it would alone,
// and the others go on in a pack without it. Runs that resume from different steps (a pack
// killed between two of its runs' checkpoints) resume together from the last step all of
// them have a checkpoint of; where there is none, those at the same step train together,
// one group after the other. A pack of one run trains as Train does.
func TrainPacked(ctx context.Context, runs []PackRun) []PackResult {
	results := make([]PackResult, len(runs))
	var members []*packMember
	for i, r := range runs {
		m := &packMember{index: i, run: r, logger: r.Opts.Logger}
		if m.logger == nil {
			m.logger = slog.Default()
		}
		if err := m.plan(ctx); err != nil {
			results[i].Err = err
			continue
		}
		if done, err := finishedAlready(ctx, m.plan0, m.run.Run, m.plan0.info, m.logger); done != nil || err != nil {
			results[i] = PackResult{done, err}
			continue
		}
		members = append(members, m)
	}
	for _, group := range alignStarts(ctx, members, results) {
		trainGroup(ctx, group, results)
	}
	return results
}

// packMember is one run of a pack as it trains.
type packMember struct {
	index  int // in TrainPacked's runs
	run    PackRun
	logger *slog.Logger
	plan0  *runPlan
	step   *Step
	l      *loop
	reader *epochReader // the epoch being read
}

// plan checks the run and decides where it starts (planRun).
func (m *packMember) plan(ctx context.Context) error {
	p, err := planRun(ctx, m.run.Step, m.run.Run, m.run.Opts.Source.Info(), m.run.Opts.Resume)
	if err != nil {
		return err
	}
	m.plan0 = p
	m.run.Run.ExtendedFrom = p.extendedFrom
	return nil
}

// startStep is the number of steps the run has done when it starts.
func (m *packMember) startStep() int {
	if m.plan0.header == nil {
		return 0
	}
	return m.plan0.header.State.StepsDone
}

// alignStarts groups the runs by the step they start from, after moving each that resumes
// from a later step than another back to that step's checkpoint where it still has it.
func alignStarts(ctx context.Context, members []*packMember, results []PackResult) [][]*packMember {
	if len(members) == 0 {
		return nil
	}
	first := slices.MinFunc(members, func(a, b *packMember) int { return a.startStep() - b.startStep() }).startStep()
	var kept []*packMember
	for _, m := range members {
		if s := m.startStep(); s > first && first > 0 {
			paths, steps, err := ListCheckpoints(ctx, m.run.Run.Out)
			if err != nil {
				results[m.index].Err = err
				continue
			}
			if i := slices.Index(steps, first); i >= 0 {
				m.logger.Info("resuming from an earlier checkpoint, where the other runs of its pack are", "checkpoint", paths[i], "latest_step", s)
				m.run.Opts.Resume = paths[i]
				if err := m.plan(ctx); err != nil {
					results[m.index].Err = err
					continue
				}
			}
		}
		kept = append(kept, m)
	}
	var groups [][]*packMember
	for _, m := range kept {
		i := slices.IndexFunc(groups, func(g []*packMember) bool { return g[0].startStep() == m.startStep() })
		if i < 0 {
			groups = append(groups, nil)
			i = len(groups) - 1
		}
		groups[i] = append(groups[i], m)
	}
	return groups
}

// inStep reports why run b cannot keep in step with run a in a pack.
func inStep(a, b *packMember) error {
	ra, rb := a.run.Run, b.run.Run
	ia, ib := a.plan0.info, b.plan0.info
	differ := func(what string, x, y any) error {
		return fmt.Errorf("runs %s and %s cannot train in one pack: %s %v and %v", ra.Out, rb.Out, what, x, y)
	}
	switch {
	case a.run.Opts.Backend != b.run.Opts.Backend:
		return differ("backend", ra.Backend, rb.Backend)
	case ra.BatchSize != rb.BatchSize:
		return differ("batch size", ra.BatchSize, rb.BatchSize)
	case ia.Examples/ra.BatchSize != ib.Examples/rb.BatchSize:
		return differ("batches per epoch", ia.Examples/ra.BatchSize, ib.Examples/rb.BatchSize)
	case ia.Height != ib.Height || ia.Width != ib.Width || ia.Channels != ib.Channels:
		return differ("image size", fmt.Sprintf("%dx%dx%d", ia.Height, ia.Width, ia.Channels), fmt.Sprintf("%dx%dx%d", ib.Height, ib.Width, ib.Channels))
	case ra.Epochs != rb.Epochs:
		return differ("epochs", ra.Epochs, rb.Epochs)
	case ra.CheckpointEvery != rb.CheckpointEvery:
		return differ("checkpoint interval", ra.CheckpointEvery, rb.CheckpointEvery)
	case ra.MaxSteps != rb.MaxSteps:
		return differ("max steps", ra.MaxSteps, rb.MaxSteps)
	case ra.MonitorEvery != rb.MonitorEvery:
		return differ("monitor interval", ra.MonitorEvery, rb.MonitorEvery)
	case a.plan0.cfg.Precision != b.plan0.cfg.Precision:
		return differ("precision", a.plan0.cfg.Precision, b.plan0.cfg.Precision)
	}
	return nil
}

// start builds the run's step and loop (Train's, from the plan).
func (m *packMember) start(ctx context.Context) error {
	info := m.plan0.info
	step, err := NewStep(m.run.Opts.Backend, m.plan0.cfg, info.Height, info.Width)
	if err != nil {
		return err
	}
	l, err := startLoop(ctx, step, m.plan0, m.run.Run, m.run.Opts, m.logger)
	if err != nil {
		step.Finalize()
		return err
	}
	m.step, m.l = step, l
	return nil
}

// end closes what start opened; a second call does nothing.
func (m *packMember) end(ctx context.Context) {
	if m.reader != nil {
		_ = m.reader.close()
		m.reader = nil
	}
	if m.l != nil {
		if m.l.inflight != nil {
			finalizeAll(m.l.inflight.pending.out)
			m.l.inflight = nil
		}
		m.l.close(ctx)
		m.l = nil
	}
	if m.step != nil {
		m.step.Finalize()
		m.step = nil
	}
}

// trainGroup trains runs that start from the same step: those that keep in step with the
// first in one pack (alone when it is the only one), then the rest the same way; a run whose
// method cannot pack trains alone. It records each run's outcome.
func trainGroup(ctx context.Context, group []*packMember, results []PackResult) {
	var packed, alone, rest []*packMember
	for _, m := range group {
		switch {
		case len(group) > 1 && CanPack(m.plan0.cfg) != nil:
			alone = append(alone, m)
		case len(packed) > 0 && inStep(packed[0], m) != nil:
			m.logger.Info("training without the pack", "run", m.run.Run.Out, "why", inStep(packed[0], m))
			rest = append(rest, m)
		default:
			packed = append(packed, m)
		}
	}
	trainPack(ctx, packed, results)
	for _, m := range alone {
		trainPack(ctx, []*packMember{m}, results)
	}
	if len(rest) > 0 {
		trainGroup(ctx, rest, results)
	}
}

// trainPack trains runs that keep in step: in a PackedStep, or as Train does when there is
// one.
func trainPack(ctx context.Context, group []*packMember, results []PackResult) {
	var ready []*packMember
	defer func() {
		for _, m := range ready {
			m.end(ctx)
		}
	}()
	for _, m := range group {
		// One bar for the pack, the first run's: the others' progress is the same.
		if len(ready) > 0 {
			m.run.Opts.Progress = progress.Options{}
		}
		if err := m.start(ctx); err != nil {
			results[m.index].Err = err
			m.end(ctx)
			continue
		}
		ready = append(ready, m)
	}
	switch len(ready) {
	case 0:
		return
	case 1:
		m := ready[0]
		sum, err := m.l.runAll(ctx)
		results[m.index] = PackResult{sum, err}
		return
	}
	outs := make([]string, len(ready))
	for i, m := range ready {
		outs[i] = m.run.Run.Out
	}
	ready[0].logger.Info("training runs together, one compiled step for all", "runs", len(ready), "outputs", outs)
	d := &packDriver{members: slices.Clone(ready), results: results}
	if err := d.build(); err != nil {
		d.failAll(err)
		return
	}
	defer func() {
		if d.pack != nil {
			d.pack.Finalize()
		}
	}()
	if err := d.runAll(ctx); err != nil {
		d.failAll(err)
	}
}

// packDriver runs the loops of a pack's runs in step, one launch of the PackedStep for all.
type packDriver struct {
	members []*packMember // the runs still training, in the pack's order
	results []PackResult
	pack    *PackedStep
}

// build packs the members' steps, and has each loop sync its step from the pack before
// reading it.
func (d *packDriver) build() error {
	steps := make([]*Step, len(d.members))
	for k, m := range d.members {
		steps[k] = m.step
		m.l.sync = func() error { return d.sync(m) }
	}
	pack, err := NewPackedStep(steps...)
	if err != nil {
		return err
	}
	d.pack = pack
	return nil
}

func (d *packDriver) sync(m *packMember) error {
	k := slices.Index(d.members, m)
	if k < 0 {
		return fmt.Errorf("run %s is not in the pack", m.run.Run.Out)
	}
	return d.pack.Sync(k)
}

// failure is a run of the pack that failed, and why.
type failure struct {
	m   *packMember
	err error
}

// drop ends the runs that failed, each with its error, and packs the others anew: their
// variables go back to their steps, which the new pack copies.
func (d *packDriver) drop(ctx context.Context, failed []failure) error {
	if len(failed) == 0 {
		return nil
	}
	isFailed := func(m *packMember) bool {
		return slices.ContainsFunc(failed, func(f failure) bool { return f.m == m })
	}
	for k, m := range d.members {
		if !isFailed(m) {
			if err := d.pack.Sync(k); err != nil {
				return err
			}
		}
	}
	for _, f := range failed {
		d.results[f.m.index].Err = f.err
		f.m.end(ctx)
	}
	d.members = slices.DeleteFunc(d.members, isFailed)
	d.pack.Finalize()
	d.pack = nil
	if len(d.members) == 0 {
		return nil
	}
	return d.build()
}

// failAll ends every run still training with err.
func (d *packDriver) failAll(err error) {
	for _, m := range d.members {
		if d.results[m.index].Err == nil {
			d.results[m.index].Err = err
		}
	}
}

// runAll is loop.runAll for every run of the pack.
func (d *packDriver) runAll(ctx context.Context) error {
	for len(d.members) > 0 && d.members[0].l.state.Epoch < d.members[0].l.run.Epochs {
		stop, err := d.runEpoch(ctx)
		if err != nil {
			return err
		}
		if stop {
			for _, m := range d.members {
				sum, err := m.l.stopEarly(ctx)
				d.results[m.index] = PackResult{sum, err}
			}
			return nil
		}
	}
	for _, m := range d.members {
		sum, err := m.l.stop(ctx, true)
		d.results[m.index] = PackResult{sum, err}
	}
	return nil
}

// runEpoch is loop.runEpoch for every run of the pack: each reads its own batches, and one
// launch takes a step of all.
func (d *packDriver) runEpoch(ctx context.Context) (stop bool, err error) {
	var failed []failure
	for _, m := range d.members {
		r, err := m.l.openEpoch(ctx)
		if err != nil {
			failed = append(failed, failure{m, err})
			continue
		}
		m.reader = r
	}
	if err := d.drop(ctx, failed); err != nil {
		return false, err
	}
	for len(d.members) > 0 && d.members[0].l.state.Batch < d.members[0].l.stepsPerEpoch {
		batches := make([]*Batch, 0, len(d.members))
		failed = nil
		for _, m := range d.members {
			b, interrupted, err := m.reader.next(ctx)
			if interrupted {
				err := d.finishSteps(ctx)
				if cerr := d.closeEpoch(ctx); err == nil {
					err = cerr
				}
				return true, err
			}
			if err != nil {
				failed = append(failed, failure{m, err})
				continue
			}
			batches = append(batches, b)
		}
		if err := d.drop(ctx, failed); err != nil || len(d.members) == 0 {
			return false, err
		}
		lrs := make([]float64, len(d.members))
		for k, m := range d.members {
			lrs[k] = m.l.sched.At(m.l.state.StepsDone)
		}
		launched := time.Now()
		pending, err := d.pack.Launch(batches, lrs)
		if err != nil {
			return false, fmt.Errorf("step %d: %w", d.members[0].l.state.StepsDone+1, err)
		}
		var stopNow, epochDone bool
		failed = nil
		for k, m := range d.members {
			s, e, err := m.l.launched(ctx, pending[k], batches[k].N, lrs[k], launched)
			if err != nil {
				if m.l.inflight == nil || m.l.inflight.pending != pending[k] {
					finalizeAll(pending[k].out)
				}
				failed = append(failed, failure{m, err})
				continue
			}
			stopNow, epochDone = stopNow || s, epochDone || e
		}
		if err := d.drop(ctx, failed); err != nil {
			return false, err
		}
		if stopNow || epochDone {
			return stopNow, d.closeEpoch(ctx)
		}
	}
	if err := d.closeEpoch(ctx); err != nil {
		return false, err
	}
	return false, d.finishSteps(ctx)
}

// closeEpoch ends the reading of the epoch; a run whose data cannot be closed fails.
func (d *packDriver) closeEpoch(ctx context.Context) error {
	var failed []failure
	for _, m := range d.members {
		if m.reader == nil {
			continue
		}
		err := m.reader.close()
		m.reader = nil
		if err != nil {
			failed = append(failed, failure{m, err})
		}
	}
	return d.drop(ctx, failed)
}

// finishSteps reads and logs every run's step in flight.
func (d *packDriver) finishSteps(ctx context.Context) error {
	var failed []failure
	for _, m := range d.members {
		if err := m.l.finishStep(ctx); err != nil {
			failed = append(failed, failure{m, err})
		}
	}
	return d.drop(ctx, failed)
}

// TrainPackOnShards is TrainOnShards for runs that train together (TrainPacked): each run's
// shards are opened and its settings checked before a backend exists, runs that read the
// same evaluation shards share one kNN monitor, and one backend, of the first run's kind and
// precision, trains them all. A run that cannot share it (another backend or precision)
// fails with a *SetupError, as does one whose settings do not fit; the others train.
func TrainPackOnShards(ctx context.Context, trainings []ShardTraining) []PackResult {
	results := make([]PackResult, len(trainings))
	monitors := map[monitorKey]*KNNMonitor{}
	var runs []PackRun
	var index []int // of runs in trainings
	var prec Precision
	for i, o := range trainings {
		opts, p, err := o.options(ctx, monitors)
		if err != nil {
			results[i].Err = err
			continue
		}
		if len(runs) > 0 {
			first := trainings[index[0]]
			if o.Backend != first.Backend || o.Plugin != first.Plugin || p != prec {
				results[i].Err = &SetupError{Err: fmt.Errorf("run %s cannot train in the pack of %s: backend %s at %s, the pack's is %s at %s",
					o.Run.Out, first.Run.Out, o.Backend, p, first.Backend, prec)}
				continue
			}
		}
		prec = p
		runs = append(runs, PackRun{Step: o.Step, Run: o.Run, Opts: opts})
		index = append(index, i)
	}
	if len(runs) == 0 {
		return results
	}
	first := trainings[index[0]]
	backend, err := gpu.New(ctx, gpu.Options{Kind: first.Backend, Plugin: first.Plugin, TF32: prec.AllowsTF32()})
	if err != nil {
		for _, i := range index {
			results[i].Err = err
		}
		return results
	}
	defer backend.Finalize()
	for i := range runs {
		runs[i].Run.Backend = backend.Name()
		runs[i].Opts.Backend = backend
	}
	for j, r := range TrainPacked(ctx, runs) {
		results[index[j]] = r
	}
	return results
}
