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

	if a := r.Agreement; a != nil {
		b.WriteString("\n## Agreement (float32, TF32 off)\n\n")
		if a.Error != "" && a.Variables == 0 {
			fmt.Fprintf(&b, "failed: %s\n", a.Error)
		} else {
			fmt.Fprintf(&b, "%s, %d px, batch %d pairs, one step's gradients on %s against %s:\n\n", a.Model, a.Size, a.Batch, a.Backend, a.Reference)
			b.WriteString("| measure | worst | tolerance | |\n|---|---|---|---|\n")
			mark := func(v, tol float64) string {
				if v <= tol {
					return "ok"
				}
				return "**over**"
			}
			fmt.Fprintf(&b, "| loss %.7g vs %.7g, relative | %.2g | %.0g | %s |\n", a.Loss, a.LossRef, a.LossRelErr, TolLoss, mark(a.LossRelErr, TolLoss))
			fmt.Fprintf(&b, "| ‖g‖² per variable (%d), relative | %.2g (%s) | %.0g | %s |\n", a.Variables, a.MaxSumSqRelErr, a.WorstSumSq, TolSumSquares, mark(a.MaxSumSqRelErr, TolSumSquares))
			fmt.Fprintf(&b, "| max abs per variable, relative | %.2g | %.0g | %s |\n", a.MaxMaxAbsRelErr, TolMaxAbs, mark(a.MaxMaxAbsRelErr, TolMaxAbs))
			fmt.Fprintf(&b, "| sum per variable, error / (‖g‖·√n) | %.2g | %.0g | %s |\n", a.MaxSumErrNormed, TolSum, mark(a.MaxSumErrNormed, TolSum))
			fmt.Fprintf(&b, "\nresult: **%s**\n", map[bool]string{true: "agree", false: "DISAGREE"}[a.Pass])
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
