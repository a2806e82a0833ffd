package trainstep

import (
	"fmt"
	"math"
)

// ReferenceBatch is the batch size the base learning rate is quoted for: lr = base·batch/256.
const ReferenceBatch = 256

// Schedule is the learning rate over a run: a linear warm-up from Peak/WarmupSteps to Peak over
// the first WarmupSteps steps, then cosine annealing from Peak to 0 at TotalSteps (per step, as
// SimCLR's schedule).
type Schedule struct {
	Peak        float64
	WarmupSteps int
	TotalSteps  int
}

// NewSchedule returns the schedule for a base learning rate quoted per 256 images (the paper's
// 0.03), scaled to batchSize, with warm-up and total lengths in steps.
func NewSchedule(base float64, batchSize, warmupSteps, totalSteps int) (Schedule, error) {
	switch {
	case !(base > 0) || math.IsInf(base, 0):
		return Schedule{}, fmt.Errorf("learning rate %v: must be a positive number", base)
	case totalSteps < 1:
		return Schedule{}, fmt.Errorf("a run of %d steps has nothing to train", totalSteps)
	case warmupSteps < 0 || warmupSteps > totalSteps:
		return Schedule{}, fmt.Errorf("warm-up of %d steps: want between 0 and the run's %d steps", warmupSteps, totalSteps)
	}
	return Schedule{Peak: base * float64(batchSize) / ReferenceBatch, WarmupSteps: warmupSteps, TotalSteps: totalSteps}, nil
}

// At is the learning rate of step (0-based).
func (s Schedule) At(step int) float64 {
	if step < s.WarmupSteps {
		return s.Peak * float64(step+1) / float64(s.WarmupSteps)
	}
	span := s.TotalSteps - s.WarmupSteps
	if span <= 0 {
		return s.Peak
	}
	progress := math.Min(float64(step-s.WarmupSteps)/float64(span), 1)
	return s.Peak * 0.5 * (1 + math.Cos(math.Pi*progress))
}
