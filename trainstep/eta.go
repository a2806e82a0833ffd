package trainstep

import "time"

// runClock estimates how long a run has left, for the progress ETA: its steps at the time a
// step has taken in this process, plus the monitor's runs still to come (after every
// RunConfig.MonitorEvery epochs) at the time one has taken. Before the first has run, a
// monitor run is guessed at its images (TrainOptions.MonitorImages) taking a third of a
// training image's time each: it only runs the forward pass, about a third of a training
// step's arithmetic (the backward pass is about twice the forward).
type runClock struct {
	startSteps    int // steps done when this process started
	monitorImages int64
	monitorTime   time.Duration // of the monitor runs of this process
	monitors      int
}

// monitorRan records one monitor run.
func (c *runClock) monitorRan(d time.Duration) {
	c.monitorTime += d
	c.monitors++
}

// remaining is the estimate for loop l; false before any step has run here.
func (c *runClock) remaining(l *loop) (time.Duration, bool) {
	steps := l.state.StepsDone - c.startSteps
	if steps <= 0 || l.trainTime <= 0 {
		return 0, false
	}
	perStep := l.trainTime / time.Duration(steps)
	left := time.Duration(l.total-l.state.StepsDone) * perStep
	if l.opts.Monitor == nil || l.run.MonitorEvery <= 0 {
		return left, true
	}
	runs := 0
	for e := l.state.Epoch; e < l.run.Epochs; e++ {
		if (e+1)%l.run.MonitorEvery == 0 {
			runs++
		}
	}
	perRun := time.Duration(0)
	switch {
	case c.monitors > 0:
		perRun = c.monitorTime / time.Duration(c.monitors)
	case l.run.BatchSize > 0:
		perRun = time.Duration(float64(perStep) / float64(2*l.run.BatchSize) * float64(c.monitorImages) / 3)
	}
	return left + time.Duration(runs)*perRun, true
}
