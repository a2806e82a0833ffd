package gpucheck

import (
	"fmt"
	"strings"
)

func precisionLabel(prec string, tf32 bool) string {
	if prec == "float32" && tf32 {
		return "float32/TF32"
	}
	return prec
}

func orDash(v float64, format string) string {
	if v == 0 {
		return "—"
	}
	return fmt.Sprintf(format, v)
}

// Markdown renders the results as the tables BENCHMARKS.md takes: the machine, agreement,
// the training step beside PyTorch, feeding, and what failed.
func (r *Result) Markdown() string {
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
	fmt.Fprintf(&b, "; driver %s\n", orText(r.Host.Driver, "—"))
	fmt.Fprintf(&b, "- host: %s, %d CPUs, %s; started %s, %.0f s\n", r.Host.Hostname, r.Host.CPUs, r.Host.OS, r.Started, r.Seconds)
	if r.Torch != nil {
		fmt.Fprintf(&b, "- PyTorch %s (torchvision %s, CUDA %s, cuDNN %s)\n", r.Torch.Torch, orText(r.Torch.Torchvision, "—"), orText(r.Torch.CUDA, "—"), orText(r.Torch.CuDNN, "—"))
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

	for _, a := range []*AgreementResult{r.Agreement, r.AgreementTF32} {
		if a != nil {
			a.markdown(&b)
		}
	}

	if len(r.Speed) > 0 {
		b.WriteString("\n## Training step (images/s count both views of every pair)\n\n")
		b.WriteString("| model | px | batch (pairs) | precision | dcl images/s | dcl median ms | dcl first step s | dcl peak MiB | PyTorch images/s | PyTorch peak MiB (reserved / process) | dcl ÷ PyTorch |\n")
		b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, s := range r.Speed {
			t := r.Torch.find(s)
			tImg, tMem, ratio := "—", "—", "—"
			if t != nil && t.Error == "" && t.ImagesPerSec > 0 {
				tImg = fmt.Sprintf("%.0f", t.ImagesPerSec)
				tMem = fmt.Sprintf("%.0f / %s", t.MaxReservedMiB, orDash(t.ProcessMiB, "%.0f"))
				if s.ImagesPerSec > 0 {
					ratio = fmt.Sprintf("%.2f×", s.ImagesPerSec/t.ImagesPerSec)
				}
			} else if t != nil && t.Error != "" {
				tImg = "failed"
			}
			dImg, dMem := orDash(s.ImagesPerSec, "%.0f"), orDash(s.PeakMemoryMiB, "%.0f")
			if s.Error != "" {
				dImg, dMem = "failed", "—"
			}
			fmt.Fprintf(&b, "| %s | %d | %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", s.Model, s.Size, s.Batch, precisionLabel(s.Precision, s.TF32),
				dImg, orDash(s.MedianMs, "%.1f"), orDash(s.FirstStepSeconds, "%.1f"), dMem, tImg, tMem, ratio)
		}
		for _, s := range r.Speed {
			if s.MemorySource != "" {
				fmt.Fprintf(&b, "\ndcl peak memory: %s. PyTorch: torch.cuda.max_memory_reserved, and nvidia-smi's figure for its process.\n", s.MemorySource)
				break
			}
		}
	}

	if len(r.Feeding) > 0 {
		b.WriteString("\n## Feeding: the shard reader (decode, shuffle, batch) on this machine's cores\n\n")
		b.WriteString("| shards | source | pairs | batch | cores | reader images/s | step images/s | reader ÷ step (goal ≥ 2) |\n|---|---|---|---|---|---|---|---|\n")
		for _, f := range r.Feeding {
			img := orDash(f.ImagesPerSec, "%.0f")
			if f.Error != "" {
				img = "failed"
			}
			fmt.Fprintf(&b, "| %s, %d ch | %s | %d | %d | %d | %s | %s (%s) | %s |\n", f.Name, f.Channels, orText(f.Source, "—"), f.Pairs, f.Batch, f.Cores,
				img, orDash(f.StepImagesPerSec, "%.0f"), f.Against, orDash(f.Ratio, "%.1f×"))
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

func orText(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}

// markdown writes one agreement row's table.
func (a *AgreementResult) markdown(b *strings.Builder) {
	fmt.Fprintf(b, "\n## Agreement (%s)\n\n", orText(a.Precision, "float32"))
	if a.Error != "" && a.Variables == 0 {
		fmt.Fprintf(b, "failed: %s\n", a.Error)
		return
	}
	fmt.Fprintf(b, "%s, %d px, batch %d pairs, one step's gradients on %s (%s) against %s. "+
		"Tolerance: %d × the CPU's %s floor (float32: Winograd against direct convolutions; TF32: operands rounded to TF32), "+
		"never below the a priori float32 bound for depth %d and fan-in %d.\n\n",
		a.Model, a.Size, a.Batch, a.Backend, a.Precision, a.Reference, Headroom, a.Precision, a.Shape.Depth, a.Shape.FanIn)
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
		a.MaxSumSqRelErr, orText(a.WorstSumSq, "—"), a.FloorRatio, a.TF32Ratio)
	fmt.Fprintf(b, "\nresult: **%s**\n", map[bool]string{true: "AGREE", false: "DISAGREE"}[a.Pass])
}
