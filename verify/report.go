package verify

import (
	"cmp"
	"fmt"
	"strings"
)

// SpeedGoal is the speed a row must reach against PyTorch eager in the same precision: 1.5×
// at the batch sizes DCL is about (resnet18-cifar at 64 pairs and fewer, where a launch per
// operation costs PyTorch most), 1.2× elsewhere.
func SpeedGoal(s SpeedResult) float64 {
	if s.Model == "resnet18-cifar" && s.Batch <= 64 {
		return 1.5
	}
	return 1.2
}

// speedMarkdown writes the training-step table: dcl beside PyTorch eager and compiled, with
// each row's goals.
func (r *CheckResult) speedMarkdown(b *strings.Builder) {
	b.WriteString("\n## Training step (images/s count both views of every pair; medians of synchronised steps)\n\n")
	b.WriteString("| model | px | batch (pairs) | precision | dcl images/s | dcl pipelined | dcl first step s | PyTorch eager | dcl ÷ eager (goal) | torch.compile | dcl ÷ compiled | dcl MiB: process / allocator peak / pool peak | PyTorch MiB: process / allocated / reserved | memory goal |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range r.Speed {
		eager, compiled := r.Torch.find(s, false), r.Torch.find(s, true)
		img := func(t *TorchRow) string {
			switch {
			case t == nil:
				return "—"
			case t.Error != "":
				if strings.HasPrefix(t.Error, "skipped") {
					return "skipped"
				}
				return "failed"
			}
			return fmt.Sprintf("%.0f", t.ImagesPerSec)
		}
		ratio := func(t *TorchRow, goal float64) string {
			if t == nil || t.Error != "" || t.ImagesPerSec <= 0 || s.ImagesPerSec <= 0 {
				return "—"
			}
			v := s.ImagesPerSec / t.ImagesPerSec
			if goal == 0 {
				return fmt.Sprintf("%.2f×", v)
			}
			return fmt.Sprintf("%.2f× (%.1f×: %s)", v, goal, metMissed(v >= goal))
		}
		dImg := orDash(s.ImagesPerSec, "%.0f")
		if s.Error != "" {
			dImg = "failed"
		}
		var alloc, pool float64
		if s.Allocator != nil {
			alloc, pool = s.Allocator.PeakInUseMiB, s.Allocator.PeakPoolMiB
		}
		dMem := fmt.Sprintf("%s / %s / %s", orDash(s.PeakMemoryMiB, "%.0f"), orDash(alloc, "%.0f"), orDash(pool, "%.0f"))
		tMem, memGoal := "—", "—"
		if eager != nil && eager.Error == "" {
			tMem = fmt.Sprintf("%s / %.0f / %.0f", orDash(eager.ProcessMiB, "%.0f"), eager.MaxAllocatedMiB, eager.MaxReservedMiB)
			// The allocator's pool against PyTorch's reserved memory: each is what its
			// allocator held from the driver, the CUDA context left out on both sides.
			if ours := cmp.Or(pool, alloc); ours > 0 && eager.MaxReservedMiB > 0 {
				memGoal = fmt.Sprintf("%.2f× reserved: %s", ours/eager.MaxReservedMiB, metMissed(ours <= eager.MaxReservedMiB))
			}
		}
		fmt.Fprintf(b, "| %s | %d | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", s.Model, s.Size, s.Batch, s.Precision,
			dImg, orDash(s.PipelinedImagesPerSec, "%.0f"), orDash(s.FirstStepSeconds, "%.1f"), img(eager), ratio(eager, SpeedGoal(s)),
			img(compiled), ratio(compiled, 0), dMem, tMem, memGoal)
	}
	for _, s := range r.Speed {
		if s.MemorySource != "" {
			fmt.Fprintf(b, "\ndcl process memory: %s; allocator figures from PJRT's device memory statistics. "+
				"PyTorch: nvidia-smi's figure for its process, torch.cuda.max_memory_allocated and max_memory_reserved.\n", s.MemorySource)
			break
		}
	}
}

func metMissed(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}

func orDash(v float64, format string) string {
	if v == 0 {
		return "—"
	}
	return fmt.Sprintf(format, v)
}

// Markdown renders the results as the tables BENCHMARKS.md takes: the machine, agreement,
// the training step beside PyTorch, feeding, and what failed.
func (r *CheckResult) Markdown() string {
	var b strings.Builder
	b.WriteString("# dcl gpu-check\n\n")
	gpu := r.Host.GPU
	if gpu == "" {
		gpu = "none (backend " + r.Backend + ")"
	}
	fmt.Fprintf(&b, "- GPU: %s", gpu)
	if r.Host.GPUMiB > 0 {
		fmt.Fprintf(&b, ", %d MiB", r.Host.GPUMiB)
	}
	fmt.Fprintf(&b, "; driver %s\n", cmp.Or(r.Host.Driver, "—"))
	fmt.Fprintf(&b, "- host: %s, %d CPUs, %s; started %s, %.0f s\n", r.Host.Hostname, r.Host.CPUs, r.Host.OS, r.Started, r.Seconds)
	if r.Torch != nil {
		fmt.Fprintf(&b, "- PyTorch %s (torchvision %s, CUDA %s, cuDNN %s)\n", r.Torch.Torch, cmp.Or(r.Torch.Torchvision, "—"), cmp.Or(r.Torch.CUDA, "—"), cmp.Or(r.Torch.CuDNN, "—"))
	}
	if r.Quick {
		b.WriteString("- **quick mode**: tiny models and batches; the figures only show the check runs\n")
	}
	if len(r.Commands) > 0 {
		b.WriteString("- commands:\n")
		for _, c := range r.Commands {
			fmt.Fprintf(&b, "  - `%s`\n", c)
		}
	}

	for _, a := range []*AgreementResult{r.Agreement, r.AgreementTF32, r.AgreementConvDefault} {
		if a != nil {
			a.markdown(&b)
		}
	}

	if len(r.Speed) > 0 {
		r.speedMarkdown(&b)
	}
	if len(r.Packing) > 0 {
		r.packingMarkdown(&b)
	}

	if l := r.Loop; l != nil {
		b.WriteString("\n## The step as dcl train runs it\n\n")
		if l.Error != "" {
			fmt.Fprintf(&b, "failed: %s\n", l.Error)
		} else {
			fmt.Fprintf(&b, "%s, %d px, batch %d, %s: shards read and decoded on the host, the log written every step, a checkpoint at the end; "+
				"%d steps, the first %d left out.\n\n| dcl train images/s | bare step, pipelined | ratio (goal ≥ 0.9) |\n|---|---|---|\n| %.0f | %s | %s |\n",
				l.Model, l.Size, l.Batch, l.Precision, l.Steps, l.Skipped, l.ImagesPerSec, orDash(l.BareImagesPerSec, "%.0f"), orDash(l.Ratio, "%.2f"))
		}
	}

	if len(r.Feeding) > 0 {
		b.WriteString("\n## Feeding: the shard reader (decode, shuffle, batch) on this machine's cores\n\n")
		b.WriteString("| shards | source | pairs | batch | cores | reader images/s | per CPU-second | step images/s × devices | reader ÷ (step × devices) (goal ≥ 2) |\n|---|---|---|---|---|---|---|---|---|\n")
		for _, f := range r.Feeding {
			img := orDash(f.ImagesPerSec, "%.0f")
			if f.Error != "" {
				img = "failed"
			}
			kind := "stored views"
			if f.Online {
				kind = "base, views on the fly"
			}
			fmt.Fprintf(&b, "| %s (%s), %d ch | %s | %d | %d | %d | %s | %s | %s (%s) | %s |\n", f.Name, kind, f.Channels, cmp.Or(f.Source, "—"), f.Pairs, f.Batch, f.Cores,
				img, orDash(f.ImagesPerCPUSecond, "%.0f"), f.demand(), f.Against, orDash(f.Ratio, "%.1f×"))
		}
	}

	if len(r.Errors) > 0 {
		b.WriteString("\n## Problems\n\n")
		for _, e := range r.Errors {
			fmt.Fprintf(&b, "- %s\n", e)
		}
	}
	return b.String()
}

// markdown writes one agreement row's table.
func (a *AgreementResult) markdown(b *strings.Builder) {
	title := cmp.Or(a.Precision, "float32")
	if a.ConvDefault {
		title += ", convolutions at XLA's DEFAULT precision as before the go-xla patch: a diagnostic"
	}
	fmt.Fprintf(b, "\n## Agreement (%s)\n\n", title)
	if a.Error != "" && a.Variables == 0 {
		fmt.Fprintf(b, "failed: %s\n", a.Error)
		return
	}
	fmt.Fprintf(b, "%s, %d px, batch %d pairs, one step's gradients on %s (%s) against %s. "+
		"Tolerance: %d × the CPU's %s floor (float32: Winograd against direct convolutions; TF32: operands rounded to TF32), "+
		"never below %d × the a priori %s bound for depth %d and fan-in %d.\n\n",
		a.Model, a.Size, a.Batch, a.Backend, a.Precision, a.Reference, Headroom, a.Precision, Headroom, a.Precision, a.Shape.Depth, a.Shape.FanIn)
	b.WriteString("| measure | backend | float32 floor | TF32 floor | tolerance | |\n|---|---|---|---|---|---|\n")
	mark := func(v, tol float64) string {
		if v <= tol {
			return "ok"
		}
		return "**over**"
	}
	for _, m := range []struct {
		name                  string
		got, f32, tf32, limit float64
	}{
		{fmt.Sprintf("loss (%.7g vs %.7g), relative", a.Loss, a.LossRef), a.Spread.Loss, a.Float32Floor.Loss, a.TF32Floor.Loss, a.Tolerances.Loss},
		{fmt.Sprintf("‖g‖² of %d gradients, RMS relative", a.Variables), a.Spread.SumSquares, a.Float32Floor.SumSquares, a.TF32Floor.SumSquares, a.Tolerances.SumSquares},
		{"largest elements, RMS relative", a.Spread.MaxAbs, a.Float32Floor.MaxAbs, a.TF32Floor.MaxAbs, a.Tolerances.MaxAbs},
		{"sums, RMS of error / (‖g‖·√n)", a.Spread.Sum, a.Float32Floor.Sum, a.TF32Floor.Sum, a.Tolerances.Sum},
	} {
		fmt.Fprintf(b, "| %s | %.2g | %.2g | %.2g | %.2g | %s |\n", m.name, m.got, m.f32, m.tf32, m.limit, mark(m.got, m.limit))
	}
	fmt.Fprintf(b, "\nworst single gradient: ‖g‖² %.2g (%s); the backend is %.1f× the float32 floor and %.2f× the TF32 floor\n",
		a.MaxSumSqRelErr, cmp.Or(a.WorstSumSq, "—"), a.FloorRatio, a.TF32Ratio)
	fmt.Fprintf(b, "\nresult: **%s**\n", map[bool]string{true: "AGREE", false: "DISAGREE"}[a.Pass])
}
