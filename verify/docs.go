package verify

import (
	"cmp"
	"context"
	"fmt"
	"strings"

	"github.com/dcl-beam/dcl-beam/internal/storage"
)

// The GPU tables of docs/gpu.md and BENCHMARKS.md are generated from the committed result of a
// GPU run, docs/gpu/gpu-check.json, so that no figure is typed by hand: `make docs`
// (internal/cmd/docsgen) puts Section's text between their markers.

// The sections a check's result renders.
const (
	// SummarySection is docs/gpu.md's: the machine, the agreement verdicts and the step table.
	SummarySection = "summary"
	// TablesSection is BENCHMARKS.md's: every table of the run (Markdown).
	TablesSection = "tables"
)

// CheckCommand is the GPU run that produces the results, for the sections' text while none
// is committed.
const CheckCommand = "make gpu-pack, then, on the GPU machine: scripts/gpu-check.sh OUT check; commit OUT/gpu-check.json as docs/gpu/gpu-check.json and run make docs"

// ReadCheckResult reads a gpu-check.json.
func ReadCheckResult(ctx context.Context, path string) (*CheckResult, error) {
	var r CheckResult
	if err := storage.LoadJSON(ctx, path, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Section renders section name from r (nil: no GPU run is committed yet).
func Section(name string, r *CheckResult) (string, error) {
	if r == nil {
		return fmt.Sprintf("No GPU run of this check is committed yet (docs/gpu/gpu-check.json). To make one: %s.\n", CheckCommand), nil
	}
	switch name {
	case TablesSection:
		// The report's own title gives way to the document's headings.
		md := r.Markdown()
		md = strings.TrimPrefix(md, "# dcl gpu-check\n\n")
		return strings.ReplaceAll(md, "\n## ", "\n#### "), nil
	case SummarySection:
		return r.summaryMarkdown(), nil
	}
	return "", fmt.Errorf("no gpu-check section %q: want %s or %s", name, SummarySection, TablesSection)
}

// summaryMarkdown is the machine, the agreement verdicts and the step table.
func (r *CheckResult) summaryMarkdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Measured on %s (%d MiB, driver %s), %d CPUs, %s", cmp.Or(r.Host.GPU, "no GPU"), r.Host.GPUMiB, cmp.Or(r.Host.Driver, "—"), r.Host.CPUs, r.Started)
	if r.Torch != nil {
		fmt.Fprintf(&b, ", beside PyTorch %s (cuDNN %s)", r.Torch.Torch, cmp.Or(r.Torch.CuDNN, "—"))
	}
	b.WriteString(", by `scripts/gpu-check.sh OUT check` (docs/gpu/gpu-check.json; BENCHMARKS.md has every table).\n\n")
	for _, a := range []*AgreementResult{r.Agreement, r.AgreementTF32, r.AgreementConvDefault} {
		if a == nil {
			continue
		}
		verdict := map[bool]string{true: "AGREE", false: "DISAGREE"}[a.Pass]
		if a.Error != "" && a.Variables == 0 {
			verdict = "failed: " + a.Error
		}
		what := a.Precision
		if a.ConvDefault {
			what += " with convolutions at XLA's DEFAULT precision (go-xla before dcl-beam's patch; a diagnostic)"
		}
		fmt.Fprintf(&b, "- agreement, %s: **%s** (the gradients' spread from the CPU is %.1f× the CPU's own float32 floor and %.2f× its TF32 floor)\n",
			what, verdict, a.FloorRatio, a.TF32Ratio)
	}
	r.speedMarkdown(&b)
	return b.String()
}
