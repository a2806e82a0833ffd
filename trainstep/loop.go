package trainstep

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/dcl-beam/dcl-beam/internal/progress"
	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/internal/tensorboard"
)

type loop struct {
	step          *Step
	run           RunConfig
	opts          TrainOptions
	sched         Schedule
	state         TrainState
	log           *runLog
	tb            *tensorboard.Writer
	logger        *slog.Logger
	bar           *progress.Reporter
	stepsPerEpoch int
	total         int
	summary       *Summary
	images        int    // images through the network since the start of this process
	monitorNote   string // the last monitor's measurements, for the progress status
	trainTime     time.Duration
	clock         runClock      // the ETA, monitor included
	inflight      *inflightStep // launched, results not read yet
	// sync, where set, brings step's variables up to date before they are read (a
	// checkpoint, the monitor): a packed run trains them in its pack's store.
	sync func() error
}

// syncStep brings the step's variables up to date (loop.sync).
func (l *loop) syncStep() error {
	if l.sync == nil {
		return nil
	}
	return l.sync()
}

func (l *loop) runAll(ctx context.Context) (*Summary, error) {
	for l.state.Epoch < l.run.Epochs {
		stop, err := l.runEpoch(ctx)
		if err != nil {
			return nil, err
		}
		if stop {
			return l.stopEarly(ctx)
		}
	}
	return l.stop(ctx, true)
}

// stopEarly ends a run before its last epoch (MaxSteps, or ctx cancelled): the last
// checkpoint, and, when ctx was cancelled, an error that says how to continue.
func (l *loop) stopEarly(ctx context.Context) (*Summary, error) {
	sum, err := l.stop(ctx, false)
	if err == nil && ctx.Err() != nil {
		err = fmt.Errorf("interrupted after step %d of %d (checkpoint %s; continue with --resume): %w",
			sum.StepsDone, l.total, sum.Checkpoint, ctx.Err())
	}
	return sum, err
}

// stop writes the last checkpoint (and, at the end, the summary).
func (l *loop) stop(ctx context.Context, finished bool) (*Summary, error) {
	l.state.Finished = finished
	path, err := l.checkpoint(ctx)
	if err != nil {
		return nil, err
	}
	// The bar's line ends (complete, or where an interrupt stopped it) before the notices.
	if finished {
		l.bar.Finish()
	} else {
		l.bar.End()
	}
	s := l.summary
	s.StepsDone, s.Epoch, s.Finished, s.Checkpoint = l.state.StepsDone, l.state.Epoch, finished, path
	if l.trainTime > 0 {
		s.ImagesPerSec = float64(l.images) / l.trainTime.Seconds()
	}
	if finished {
		if err := writeSummary(ctx, l.run.Out, s); err != nil {
			return nil, err
		}
		l.logger.Info("training finished", "steps", s.StepsDone, "loss", s.Loss, "mean_q", s.MeanQ, "checkpoint", path)
	} else {
		l.logger.Info("training stopped; continue with --resume", "steps_done", s.StepsDone, "of", l.total, "checkpoint", path)
	}
	return s, nil
}

// prefetched is one batch read ahead of the step that will use it.
type prefetched struct {
	batch *Batch
	err   error
}

// prefetch reads the batches of one epoch in a goroutine, two ahead of the consumer, so data
// loading (Parquet reads, decoding) overlaps with the step. Cancel ctx to stop it.
func prefetch(ctx context.Context, it BatchIterator) <-chan prefetched {
	ch := make(chan prefetched, 2)
	go func() {
		defer close(ch)
		for {
			b, err := it.Next()
			if errors.Is(err, io.EOF) {
				return
			}
			select {
			case ch <- prefetched{b, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return ch
}

// runEpoch runs the rest of the current epoch. It reports stop when the run must end early
// (MaxSteps reached, or ctx cancelled after a completed step).
func (l *loop) runEpoch(ctx context.Context) (stop bool, err error) {
	r, err := l.openEpoch(ctx)
	if err != nil {
		return false, err
	}
	defer func() {
		if cerr := r.close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	for l.state.Batch < l.stepsPerEpoch {
		b, interrupted, err := r.next(ctx)
		if interrupted {
			return true, l.finishStep(ctx)
		}
		if err != nil {
			return false, err
		}
		lr := l.sched.At(l.state.StepsDone)
		if err := l.step.SetProgress(l.state.StepsDone, l.total); err != nil {
			return false, fmt.Errorf("step %d: %w", l.state.StepsDone+1, err)
		}
		launched := time.Now()
		pending, err := l.step.Launch(b, lr)
		if err != nil {
			return false, fmt.Errorf("step %d: %w", l.state.StepsDone+1, err)
		}
		stop, epochDone, err := l.launched(ctx, pending, b.N, lr, launched)
		if err != nil || stop || epochDone {
			return stop, err
		}
	}
	return false, l.finishStep(ctx)
}

// epochReader reads the rest of the current epoch's batches of a run, prefetched.
type epochReader struct {
	l          *loop
	epoch      int
	it         BatchIterator
	ch         <-chan prefetched
	cancelRead context.CancelFunc
}

// openEpoch starts reading the rest of the current epoch; close ends it.
func (l *loop) openEpoch(ctx context.Context) (*epochReader, error) {
	epoch := l.state.Epoch
	it, err := l.opts.Source.Batches(ctx, epoch, l.run.Seed, l.run.BatchSize, l.state.Batch)
	if err != nil {
		return nil, fmt.Errorf("reading epoch %d/%d of %s: %w", epoch+1, l.run.Epochs, l.run.Data, err)
	}
	readCtx, cancelRead := context.WithCancel(ctx)
	return &epochReader{l: l, epoch: epoch, it: it, ch: prefetch(readCtx, it), cancelRead: cancelRead}, nil
}

// next returns the next batch; interrupted says ctx was cancelled first (or while the batch
// was read, whose error is then the cancellation's).
func (r *epochReader) next(ctx context.Context) (b *Batch, interrupted bool, err error) {
	l := r.l
	if ctx.Err() != nil {
		return nil, true, nil
	}
	p, ok := <-r.ch
	if !ok {
		if ctx.Err() != nil {
			return nil, true, nil
		}
		return nil, false, fmt.Errorf("epoch %d/%d of %s ended after %d of %d batches", r.epoch+1, l.run.Epochs, l.run.Data, l.state.Batch, l.stepsPerEpoch)
	}
	if p.err != nil {
		if ctx.Err() != nil {
			return nil, true, nil
		}
		return nil, false, fmt.Errorf("reading batch %d of epoch %d/%d of %s: %w", l.state.Batch, r.epoch+1, l.run.Epochs, l.run.Data, p.err)
	}
	return p.batch, false, nil
}

// close stops the reading and closes the epoch's iterator.
func (r *epochReader) close() error {
	r.cancelRead()
	for range r.ch { // let the reader goroutine finish before closing its iterator
	}
	if err := r.it.Close(); err != nil {
		return fmt.Errorf("closing epoch %d/%d of %s: %w", r.epoch+1, r.l.run.Epochs, r.l.run.Data, err)
	}
	return nil
}

// launched takes over the step just launched at time at on a batch of pairs view pairs at
// learning rate lr, and does what follows it: the previous step's results are read and
// logged, and at the end of an epoch, at MaxSteps or every CheckpointEvery steps this step's
// too, with the monitor and the checkpoint that follow. It reports stop when the run must
// end here (MaxSteps), and epochDone when the step ended the epoch.
func (l *loop) launched(ctx context.Context, pending *PendingStep, pairs int, lr float64, at time.Time) (stop, epochDone bool, err error) {
	epoch := l.state.Epoch
	// The previous step's loss is read while this one runs: no round trip to the host
	// between two steps leaves the GPU idle.
	if err := l.finishStepAt(ctx, at); err != nil {
		return false, false, err
	}
	l.state.StepsDone++
	l.state.Batch++
	l.inflight = &inflightStep{pending: pending, step: l.state.StepsDone, epoch: epoch, images: 2 * pairs, lr: lr, launched: at}
	epochDone = l.state.Batch == l.stepsPerEpoch
	maxed := l.run.MaxSteps > 0 && l.state.StepsDone >= l.run.MaxSteps
	ckpt := l.run.CheckpointEvery > 0 && l.state.StepsDone%l.run.CheckpointEvery == 0 && l.state.StepsDone < l.total
	if epochDone || maxed || ckpt {
		if err := l.finishStep(ctx); err != nil {
			return false, epochDone, err
		}
	}
	if epochDone {
		l.state.Epoch++
		l.state.Batch = 0
		if err := l.afterEpoch(ctx, epoch); err != nil {
			return false, epochDone, err
		}
	}
	if maxed {
		return true, epochDone, nil
	}
	if ckpt {
		if _, err := l.checkpoint(ctx); err != nil {
			return false, epochDone, err
		}
	}
	return false, epochDone, nil
}

// inflightStep is a launched step whose results are read when the next one is launched.
type inflightStep struct {
	pending *PendingStep
	step    int // its number, from 1
	epoch   int
	images  int
	lr      float64
	// launched is when it was launched. Its time is from then to the next launch (or, last
	// in line, to its results): a CPU backend computes in Launch, so that is the step
	// itself; a GPU one queues there, and each launch follows the read of the step two
	// before it, so in the steady state launches are one step's time apart.
	launched time.Time
}

// finishStep reads the results of the step in flight, if any, when no step follows it.
func (l *loop) finishStep(ctx context.Context) error { return l.finishStepAt(ctx, time.Time{}) }

// finishStepAt reads the results of the step in flight, if any: it checks the loss is finite,
// and logs the step (train.jsonl, TensorBoard, progress). next is when the following step was
// launched (zero: none was).
func (l *loop) finishStepAt(ctx context.Context, next time.Time) error {
	f := l.inflight
	if f == nil {
		return nil
	}
	l.inflight = nil
	res, err := f.pending.Wait()
	if err != nil {
		return fmt.Errorf("step %d: %w", f.step, err)
	}
	if math.IsNaN(res.Loss) || math.IsInf(res.Loss, 0) {
		return l.divergedError(ctx, f.step, res.Loss, f.lr)
	}
	now := time.Now()
	end := next
	if end.IsZero() {
		end = now
	}
	elapsed := end.Sub(f.launched)
	l.images += f.images
	l.trainTime += elapsed
	l.summary.Loss, l.summary.MeanQ = res.Loss, res.MeanQ
	line := LogLine{Step: f.step, Epoch: f.epoch, Loss: res.Loss, LR: f.lr, MeanQ: res.MeanQ,
		ImagesPerSec: float64(f.images) / elapsed.Seconds(), Time: now.UTC().Format(time.RFC3339Nano)}
	if err := l.log.write(line); err != nil {
		return err
	}
	if err := l.tb.Scalars(int64(line.Step), now, tensorboard.Scalar{Tag: "train/loss", Value: line.Loss},
		tensorboard.Scalar{Tag: "train/lr", Value: line.LR}, tensorboard.Scalar{Tag: "train/mean_q", Value: line.MeanQ},
		tensorboard.Scalar{Tag: "train/images_per_s", Value: line.ImagesPerSec}); err != nil {
		return err
	}
	l.bar.Status(fmt.Sprintf("epoch %d/%d loss %.4f q %.3f lr %.4g %.0f img/s%s", f.epoch+1, l.run.Epochs, res.Loss, res.MeanQ, f.lr, line.ImagesPerSec, l.monitorNote))
	l.bar.Set(int64(f.step))
	if left, ok := l.clock.remaining(l); ok {
		l.bar.SetETA(left)
	}
	return nil
}

// divergedError says which step's loss is not finite, at which learning rate and
// temperature, and which checkpoint to go back to (or that there is none yet).
func (l *loop) divergedError(ctx context.Context, step int, loss, lr float64) error {
	where := "no checkpoint was written before it: the run must start again"
	if paths, steps, err := ListCheckpoints(ctx, l.run.Out); err == nil && len(paths) > 0 {
		where = fmt.Sprintf("the last checkpoint, %s, is from step %d, before it", paths[len(paths)-1], steps[len(steps)-1])
	}
	cfg := l.step.Config()
	return fmt.Errorf("step %d: the %s loss is %v (learning rate %.4g, temperature %g); %s. Lower --lr, or raise --temperature, or check the data",
		step, cfg.Loss.Kind, loss, lr, cfg.Loss.Temperature, where)
}

func (l *loop) afterEpoch(ctx context.Context, epoch int) error {
	if l.opts.Monitor == nil || l.run.MonitorEvery == 0 || (epoch+1)%l.run.MonitorEvery != 0 {
		return nil
	}
	if err := l.syncStep(); err != nil {
		return err
	}
	began := time.Now()
	res, err := l.opts.Monitor(ctx, epoch+1, l.step, l.bar)
	if err != nil {
		return fmt.Errorf("monitor after epoch %d: %w", epoch+1, err)
	}
	l.clock.monitorRan(time.Since(began))
	l.summary.Monitor = res
	now := time.Now()
	entry := map[string]any{"epoch": epoch, "step": l.state.StepsDone, "time": now.UTC().Format(time.RFC3339Nano)}
	for k, v := range res {
		entry[k] = v
	}
	if err := l.log.write(entry); err != nil {
		return err
	}
	// Measurements (float64: the kNN accuracies) are curves; integers (kNN's k) are settings.
	var scalars []tensorboard.Scalar
	l.monitorNote = ""
	for _, k := range slices.Sorted(maps.Keys(res)) {
		if v, ok := res[k].(float64); ok {
			scalars = append(scalars, tensorboard.Scalar{Tag: monitorTag(k), Value: v})
			l.monitorNote += fmt.Sprintf(" %s %.4g", k, v)
		}
	}
	if len(scalars) == 0 {
		return nil
	}
	return l.tb.Scalars(int64(l.state.StepsDone), now, scalars...)
}

// monitorTag is the TensorBoard tag of a monitor's measurement: its name's first word is the
// group ("knn_top1" → "knn/top1"), as the step's scalars are grouped under "train/".
func monitorTag(name string) string {
	group, rest, ok := strings.Cut(name, "_")
	if !ok {
		return "monitor/" + name
	}
	return group + "/" + rest
}

// checkpoint writes the current state (a cancelled ctx still gets its checkpoint written:
// that is when it matters most) and prunes old ones.
func (l *loop) checkpoint(ctx context.Context) (string, error) {
	if err := l.syncStep(); err != nil {
		return "", err
	}
	wctx := context.WithoutCancel(ctx)
	path := storage.Join(l.run.Out, CheckpointDir, CheckpointName(l.state.StepsDone))
	run := l.run
	if err := SaveCheckpoint(wctx, path, l.step, &run, l.state); err != nil {
		return "", err
	}
	if err := l.log.flush(wctx); err != nil {
		return "", err
	}
	if err := l.tb.Flush(wctx); err != nil {
		return "", err
	}
	if err := pruneCheckpoints(wctx, l.run, path); err != nil {
		return "", err
	}
	return path, nil
}

// pruneCheckpoints removes all but the run's KeepCheckpoints newest checkpoints (none when
// it is 0), never newest: the one just written or resumed from.
func pruneCheckpoints(ctx context.Context, run RunConfig, newest string) error {
	if run.KeepCheckpoints == 0 {
		return nil
	}
	paths, steps, err := ListCheckpoints(ctx, run.Out)
	if err != nil {
		return err
	}
	mine, err := ReadCheckpointHeader(ctx, newest)
	if err != nil {
		return err
	}
	// Only the run's own checkpoints count and go: a file is one when its name is the one
	// the run gives the checkpoint of its step and its header is of this run. Anything else
	// in the folder (a copy of another run's, a file named like one) is left as it is.
	var ours []string
	for i, p := range paths {
		base := storage.Base(p)
		if p != newest {
			if base != CheckpointName(steps[i]) && base != strings.TrimSuffix(CheckpointName(steps[i]), CheckpointExt)+LegacyCheckpointExt {
				continue
			}
			if h, err := ReadCheckpointHeader(ctx, p); err != nil || h.State.StepsDone != steps[i] || !sameRun(h, mine) {
				continue
			}
		}
		ours = append(ours, p)
	}
	for len(ours) > run.KeepCheckpoints {
		if ours[0] != newest {
			if err := storage.Remove(ctx, ours[0]); err != nil {
				return err
			}
		}
		ours = ours[1:]
	}
	return nil
}

// sameRun reports whether two checkpoints' headers are of one run: the same model from the
// same initial weights, trained on the same data in the same order.
func sameRun(a, b *CheckpointHeader) bool {
	return a.Step.Model.Name == b.Step.Model.Name && a.Step.InitSeed == b.Step.InitSeed &&
		a.State.Seed == b.State.Seed && a.State.DataFingerprint == b.State.DataFingerprint
}
