package verify

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/dcl-beam/dcl-beam/gpu"
	"github.com/dcl-beam/dcl-beam/trainstep"
)

// PackingGoal is what a pack of eight runs at batch 32 must reach on a GPU: four times one
// run's images/s, summed over the pack.
const PackingGoal = 4.0

// PackingResult is one packing measurement: one run's training step alone and Runs runs in
// one PackedStep, timed in the same process one after the other, each as dcl train launches
// its steps (back to back, a step's loss read while the next runs).
type PackingResult struct {
	Model     string `json:"model"`
	Size      int    `json:"size"`
	Batch     int    `json:"batch"`
	Precision string `json:"precision"`
	Runs      int    `json:"runs"`
	Backend   string `json:"backend"`
	// AloneImagesPerSec is one run's; PackedImagesPerSec the pack's, summed over its runs;
	// Ratio the second over the first (Runs is the most it can be).
	AloneImagesPerSec  float64 `json:"alone_images_per_sec"`
	PackedImagesPerSec float64 `json:"packed_images_per_sec"`
	Ratio              float64 `json:"ratio"`
	// FirstStepSeconds is the pack's first step, its compilation included.
	FirstStepSeconds float64 `json:"first_step_seconds"`
	// PeakMemoryMiB is the child's peak (see SpeedResult).
	PeakMemoryMiB float64 `json:"peak_memory_mib,omitempty"`
	Error         string  `json:"error,omitempty"`
}

// packingRows are the packing measurements: resnet18-cifar at 32 px, batch 32 pairs (the
// paper's small batch, where one run leaves an accelerator idle), 2, 4 and 8 runs, in tf32
// and bf16; quick: width 4, batch 4, two runs in tf32.
func packingRows(quick bool) []Phase {
	if quick {
		return []Phase{{Kind: "packing", Model: trainstep.ResNet18CIFAR, Width: 4, Size: 32, Batch: 4, Channels: 3, Precision: string(trainstep.TF32), Runs: 2, Seed: 1}}
	}
	var out []Phase
	for _, prec := range []trainstep.Precision{trainstep.TF32, trainstep.BFloat16} {
		for _, k := range []int{2, 4, 8} {
			out = append(out, Phase{Kind: "packing", Model: trainstep.ResNet18CIFAR, Size: 32, Batch: 32, Channels: 3, Precision: string(prec), Runs: k, Seed: 1})
		}
	}
	return out
}

// runPacking measures p.Runs runs packed against one alone, on one backend: the runs differ
// in their initial weights and batches, as a reproduction's seeds do.
func runPacking(ctx context.Context, p Phase) (*PackingResult, error) {
	if p.Runs < 1 {
		return nil, fmt.Errorf("a packing phase of %d runs", p.Runs)
	}
	be, err := p.open(ctx)
	if err != nil {
		return nil, err
	}
	defer be.Finalize()
	cfg, err := p.stepConfig()
	if err != nil {
		return nil, err
	}
	res := &PackingResult{Model: p.Model, Size: p.Size, Batch: p.Batch, Precision: p.Precision, Runs: p.Runs, Backend: p.Backend}
	lr := 0.03 * float64(p.Batch) / 256
	steps := make([]*trainstep.Step, p.Runs)
	batches, lrs := make([]*trainstep.Batch, p.Runs), make([]float64, p.Runs)
	for k := range steps {
		c := cfg
		c.InitSeed = uint64(k + 1)
		if steps[k], err = trainstep.NewStep(be, c, p.Size, p.Size); err != nil {
			return nil, err
		}
		defer steps[k].Finalize()
		batches[k], lrs[k] = trainstep.RandomBatch(p.Seed+uint64(k), p.Batch, p.Size, p.Size, p.Channels), lr
	}
	n := max(p.Steps, 1)
	for i := 0; i < max(p.Warmup, 1); i++ {
		if _, err := steps[0].Run(batches[0], lr); err != nil {
			return nil, fmt.Errorf("warm-up step %d alone: %w", i, err)
		}
	}
	if res.AloneImagesPerSec, err = pipelined(ctx, steps[0], batches[0], lr, n); err != nil {
		return nil, err
	}
	pack, err := trainstep.NewPackedStep(steps...)
	if err != nil {
		return nil, err
	}
	defer pack.Finalize()
	launch := func() ([]*trainstep.PendingStep, error) { return pack.Launch(batches, lrs) }
	wait := func(pending []*trainstep.PendingStep) error {
		for _, ps := range pending {
			if _, err := ps.Wait(); err != nil {
				return err
			}
		}
		return nil
	}
	start := time.Now()
	for i := 0; i < max(p.Warmup, 1); i++ {
		pending, err := launch()
		if err == nil {
			err = wait(pending)
		}
		if err != nil {
			return nil, fmt.Errorf("warm-up step %d of the pack: %w", i, err)
		}
		if i == 0 {
			res.FirstStepSeconds = time.Since(start).Seconds()
		}
	}
	start = time.Now()
	var prev []*trainstep.PendingStep
	for i := range n {
		pending, err := launch()
		if err != nil {
			return nil, fmt.Errorf("packed step %d: %w", i, err)
		}
		if err := wait(prev); err != nil {
			return nil, err
		}
		prev = pending
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	if err := wait(prev); err != nil {
		return nil, err
	}
	res.PackedImagesPerSec = float64(2*p.Batch*p.Runs*n) / time.Since(start).Seconds()
	res.Ratio = res.PackedImagesPerSec / res.AloneImagesPerSec
	return res, nil
}

// measurePacking runs the packing rows, each in a child, into r.
func (c CheckConfig) measurePacking(ctx context.Context, work string, r *CheckResult, warmup, steps int, save func()) {
	for _, p := range packingRows(c.Quick) {
		p.Backend, p.Plugin, p.Warmup, p.Steps = c.Backend, c.Plugin, warmup, steps
		c.logf("packing: %d runs of %s %d px, batch %d, %s", p.Runs, p.Model, p.Size, p.Batch, p.Precision)
		var s PackingResult
		mem, err := c.child(ctx, work, p, &s)
		if err != nil {
			s = PackingResult{Model: p.Model, Size: p.Size, Batch: p.Batch, Precision: p.Precision, Runs: p.Runs, Backend: p.Backend, Error: err.Error()}
			r.Errors = append(r.Errors, fmt.Sprintf("packing %d×%s/%s: %v", p.Runs, p.Model, p.Precision, err))
		}
		s.PeakMemoryMiB = mem.peak
		r.Packing = append(r.Packing, s)
		save()
		c.logf("packing: %.0f images/s over %d runs, one run %.0f: %.2f×", s.PackedImagesPerSec, s.Runs, s.AloneImagesPerSec, s.Ratio)
	}
}

// packingMarkdown writes the packing table: a pack's images/s against one run's, with the
// goal for eight runs on a GPU.
func (r *CheckResult) packingMarkdown(b *strings.Builder) {
	b.WriteString("\n## Packed runs (one compiled step for K runs; images/s summed over the pack, against one run alone in the same process)\n\n")
	b.WriteString("| model | px | batch (pairs) | precision | runs (K) | one run images/s | pack images/s | pack ÷ one run (goal) | pack's first step s | MiB |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range r.Packing {
		ratio := orDash(s.Ratio, "%.2f×")
		if s.Runs == 8 && s.Batch == 32 && s.Ratio > 0 && s.Backend != string(gpu.CPU) && s.Backend != string(gpu.XLACPU) {
			ratio += fmt.Sprintf(" (%.0f×: %s)", PackingGoal, metMissed(s.Ratio >= PackingGoal))
		}
		packed := orDash(s.PackedImagesPerSec, "%.0f")
		if s.Error != "" {
			packed = "failed"
		}
		fmt.Fprintf(b, "| %s | %d | %d | %s | %d | %s | %s | %s | %s | %s |\n", s.Model, s.Size, s.Batch, s.Precision, s.Runs,
			orDash(s.AloneImagesPerSec, "%.0f"), packed, ratio, orDash(s.FirstStepSeconds, "%.1f"), orDash(s.PeakMemoryMiB, "%.0f"))
	}
}
