package trainstep

import (
	"fmt"
	"math"
)

// checkMemory refuses settings that cannot fit in mem bytes, before anything is allocated
// (a width or a queue a thousand times too large would otherwise end the process out of
// memory), naming the largest value that could fit. The bounds are lower bounds of what
// training holds, so they refuse only what is sure not to fit:
//   - the projector's first layer alone has FeatureDim² weights, held with their gradient and
//     momentum: 12·FeatureDim² bytes, and FeatureDim grows with the width; its last layer
//     12·FeatureDim·ProjectionDim bytes;
//   - NNCLR's prediction head, 12·2·ProjectionDim·PredictorHidden bytes;
//   - a queue (MoCo's negatives, NNCLR's support set) of K rows of the projection, with the
//     batch's similarities to every row: 4·K·(ProjectionDim + batch) bytes.
func checkMemory(m *Model, cfg StepConfig, batch int, mem int64) error {
	const bytesPerWeight = 12 // float32 weight, gradient and momentum
	f := float64(m.FeatureDim())
	if need := bytesPerWeight * f * f; need > float64(mem) {
		perWidth := f / float64(m.cfg.BaseWidth)
		maxWidth := int(math.Sqrt(float64(mem)/bytesPerWeight) / perWidth)
		return fmt.Errorf("--width=%d: %s at this width needs more than %s (its projector alone has %.0f×%.0f weights, with their gradients and momentum); this machine has %s, which fits a width of at most %d",
			m.cfg.BaseWidth, m.cfg.Name, human(need), f, f, human(float64(mem)), maxWidth)
	}
	p := float64(m.cfg.ProjectionDim)
	if need := bytesPerWeight * f * p; need > float64(mem) {
		return fmt.Errorf("--projection-dim=%d: a projection this wide needs more than %s (the projector's last layer alone has %.0f×%.0f weights, with their gradients and momentum); this machine has %s, which fits a projection dimension of at most %d",
			m.cfg.ProjectionDim, human(need), f, p, human(float64(mem)), int64(float64(mem)/(bytesPerWeight*f)))
	}
	c, err := cfg.withMethodDefaults()
	if err != nil {
		return nil
	}
	if c.Method == NNCLRMethod {
		hidden := float64(c.MethodConfig.Int(SettingPredictorHidden))
		if need := bytesPerWeight * 2 * p * hidden; need > float64(mem) {
			return fmt.Errorf("--predictor-hidden=%.0f: a prediction head this wide needs more than %s (its two layers have 2×%.0f×%.0f weights, with their gradients and momentum); this machine has %s, which fits a hidden width of at most %d",
				hidden, human(need), p, hidden, human(float64(mem)), int64(float64(mem)/(bytesPerWeight*2*p)))
		}
	}
	if c.MethodConfig.Int(SettingQueueSize) == 0 {
		return nil
	}
	row := 4 * float64(m.cfg.ProjectionDim+batch)
	if need := float64(c.MethodConfig.Int(SettingQueueSize)) * row; need > float64(mem) {
		return fmt.Errorf("--queue-size=%d: a queue this long needs more than %s (%d rows of %d projections and similarities, 4 bytes each); this machine has %s, which fits at most %d rows",
			c.MethodConfig.Int(SettingQueueSize), human(need), c.MethodConfig.Int(SettingQueueSize), m.cfg.ProjectionDim+batch, human(float64(mem)), int64(float64(mem)/row))
	}
	return nil
}

func human(b float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	i := 0
	for b >= 1024 && i < len(units)-1 {
		b /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %s", b, units[i])
}
