package verify

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/dcl-beam/dcl-beam/internal/storage"
)

// The GPU tables of docs/gpu.md and BENCHMARKS.md are generated from the committed result of a
// GPU run, docs/gpu/gpu-check.json, between marker lines, so no figure is typed by hand:
// `dcl gpu-check --render=docs/gpu/gpu-check.json --update=docs/gpu.md,BENCHMARKS.md` (make
// gpu-docs) rewrites them; a test fails when they differ from what it would write.

// Sections a document may hold, each between "<!-- gpu-check NAME: begin -->" and
// "<!-- gpu-check NAME: end -->" lines.
const (
	// SummarySection is docs/gpu.md's: the machine, the agreement verdicts and the step table.
	SummarySection = "summary"
	// TablesSection is BENCHMARKS.md's: every table of the run (Markdown).
	TablesSection = "tables"
)

// CheckCommand is the GPU run that produces the results, for the sections' text while none
// is committed.
const CheckCommand = "make gpu-pack, then, on the GPU machine: scripts/gpu-check.sh OUT check; commit OUT/gpu-check.json as docs/gpu/gpu-check.json and run make gpu-docs"

// ReadResult reads a gpu-check.json.
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

// UpdateSections rewrites every gpu-check section of doc with its rendering from r.
func UpdateSections(doc []byte, r *CheckResult) ([]byte, error) {
	var out bytes.Buffer
	rest := doc
	for {
		i := bytes.Index(rest, []byte("<!-- gpu-check "))
		if i < 0 {
			out.Write(rest)
			return out.Bytes(), nil
		}
		lineEnd := bytes.IndexByte(rest[i:], '\n')
		if lineEnd < 0 {
			return nil, errors.New("a gpu-check marker without a line end")
		}
		marker := string(rest[i : i+lineEnd])
		name, ok := strings.CutSuffix(strings.TrimPrefix(marker, "<!-- gpu-check "), ": begin -->")
		if !ok {
			return nil, fmt.Errorf("marker %q: want <!-- gpu-check NAME: begin -->", marker)
		}
		endMarker := "<!-- gpu-check " + name + ": end -->"
		j := bytes.Index(rest[i:], []byte(endMarker))
		if j < 0 {
			return nil, fmt.Errorf("section %q has no %q", name, endMarker)
		}
		text, err := Section(name, r)
		if err != nil {
			return nil, err
		}
		out.Write(rest[:i+lineEnd+1])
		out.WriteString(text)
		out.WriteString(endMarker)
		rest = rest[i+j+len(endMarker):]
	}
}

// UpdateFiles rewrites the gpu-check sections of each file from the result at resultPath
// (absent: the sections say no run is committed yet).
func UpdateFiles(ctx context.Context, resultPath string, files []string) error {
	var r *CheckResult
	if _, err := os.Stat(resultPath); err == nil {
		if r, err = ReadCheckResult(ctx, resultPath); err != nil {
			return err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, f := range files {
		doc, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		updated, err := UpdateSections(doc, r)
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if err := storage.WriteFile(ctx, f, updated); err != nil {
			return err
		}
	}
	return nil
}
