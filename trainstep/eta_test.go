package trainstep

import (
	"context"
	"testing"
	"time"

	"github.com/dcl-beam/dcl-beam/internal/progress"
)

// TestETACountsTheMonitor checks the run's time left: the steps left at the time a step has
// taken, plus each monitor run still to come, at a guess before the first has run and at the
// measured time after.
func TestETACountsTheMonitor(t *testing.T) {
	monitor := func(context.Context, int, *Step, *progress.Reporter) (map[string]any, error) { return nil, nil }
	l := &loop{
		run:   RunConfig{BatchSize: 8, Epochs: 4, MonitorEvery: 2},
		opts:  TrainOptions{Monitor: monitor, MonitorImages: 480},
		total: 40, // 10 steps an epoch
		clock: runClock{startSteps: 0, monitorImages: 480},
	}
	if _, ok := l.clock.remaining(l); ok {
		t.Error("an estimate before any step")
	}
	// 5 steps of epoch 0 at 100 ms: 35 steps left (3.5 s) and monitors after epochs 1 and 3,
	// guessed at 480 images × (100 ms / 16 images) / 3 = 1 s each.
	l.state = TrainState{StepsDone: 5, Epoch: 0}
	l.trainTime = 500 * time.Millisecond
	if got, ok := l.clock.remaining(l); !ok || got != 5500*time.Millisecond {
		t.Errorf("before any monitor run: %v, want 5.5s", got)
	}
	// After epoch 1's monitor took 3 s: 20 steps (2 s) and one monitor run (3 s) left.
	l.state = TrainState{StepsDone: 20, Epoch: 2}
	l.trainTime = 2 * time.Second
	l.clock.monitorRan(3 * time.Second)
	if got, _ := l.clock.remaining(l); got != 5*time.Second {
		t.Errorf("after one monitor run: %v, want 5s", got)
	}
	// Without a monitor, the steps alone; a resumed process counts only its own steps.
	l.opts.Monitor = nil
	l.clock.startSteps = 10
	if got, _ := l.clock.remaining(l); got != 20*200*time.Millisecond {
		t.Errorf("without a monitor, resumed at step 10: %v, want 4s", got)
	}
}
