package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/reproduce"
)

// reproduction is a section made from a reproduction's results.json: where its results and
// figures are kept, what produced them, and its text while there are none.
type reproduction struct {
	docs    string // its folder under the root: results.json and the figures
	command string // what produced the results, as the section names it
	none    string
}

var (
	demo = reproduction{docs: "docs/demo", command: "make demo",
		none: "No demo results yet: run `make demo`, then `make docs`."}
	gpuExperiment = reproduction{docs: "docs/gpu-experiment", command: "scripts/gpu-check.sh OUT experiment",
		none: "No GPU run of `experiments/fashion-mnist-gpu.yaml` has finished yet. On a machine with an NVIDIA " +
			"GPU: `make gpu-pack` here, then `scripts/gpu-check.sh OUT experiment` there (above); unpack " +
			"`OUT/experiment-state.tgz` into a folder and run `make docs GPU_RUN=that-folder` to put its report here."}
)

// demoSection is the demo's results, from --demo's run directory or docs/demo.
func demoSection(ctx context.Context, g *generator, s section) (string, []error, error) {
	return demo.section(ctx, g, s, g.demo)
}

// gpuExperimentSection is the GPU experiment's results, from --gpu's run directory or
// docs/gpu-experiment (docs/gpu/ holds the GPU check's results).
func gpuExperimentSection(ctx context.Context, g *generator, s section) (string, []error, error) {
	return gpuExperiment.section(ctx, g, s, g.gpu)
}

// section returns the text from the results in src (a run directory) when it has them, else
// from those kept in the docs folder, else the placeholder. Unless checking, it keeps src's
// results and writes the figures; checking, it draws them into a temporary folder and
// returns a difference for each that is not the kept one.
func (p reproduction) section(ctx context.Context, g *generator, s section, src string) (string, []error, error) {
	docs := filepath.Join(g.root, p.docs)
	kept := filepath.Join(docs, reproduce.ResultsName)
	from, runDir := kept, ""
	if src != "" {
		if _, err := os.Stat(filepath.Join(src, reproduce.ResultsName)); err == nil {
			from, runDir = filepath.Join(src, reproduce.ResultsName), src
		}
	}
	if _, err := os.Stat(from); errors.Is(err, os.ErrNotExist) {
		return p.none, nil, nil
	}
	var res reproduce.Results
	if err := storage.LoadJSON(ctx, from, &res); err != nil {
		return "", nil, err
	}
	if g.check && from != kept {
		// Fresh results are checked for their figures: where they ran, how long they took
		// and which build made them are the kept results' own, as the docs state them.
		var was reproduce.Results
		if err := storage.LoadJSON(ctx, kept, &was); err == nil {
			res.Machine, res.Wall, res.CodeVersion = was.Machine, was.Wall, was.CodeVersion
		}
	}
	out := docs
	if g.check {
		tmp, err := os.MkdirTemp("", "docsgen-")
		if err != nil {
			return "", nil, err
		}
		defer os.RemoveAll(tmp)
		out = tmp
	} else if from != kept {
		data, err := os.ReadFile(from)
		if err != nil {
			return "", nil, err
		}
		if err := storage.WriteFile(ctx, kept, data); err != nil {
			return "", nil, err
		}
	}
	figures, err := reproduce.WriteDocsFigures(ctx, &res, runDir, out)
	if err != nil {
		return "", nil, err
	}
	if runDir == "" { // the t-SNE kept from an earlier run directory stays
		if _, err := os.Stat(filepath.Join(docs, reproduce.TSNEPlotName)); err == nil {
			figures = append(figures, reproduce.TSNEPlotName)
		}
	}
	var diffs []error
	if g.check {
		for _, f := range figures {
			want, err := os.ReadFile(filepath.Join(out, f))
			if errors.Is(err, os.ErrNotExist) {
				continue // kept, not drawn
			}
			if err != nil {
				return "", nil, err
			}
			got, err := os.ReadFile(filepath.Join(docs, f))
			if err != nil || !bytes.Equal(got, want) {
				diffs = append(diffs, fmt.Errorf("%s/%s is not the figure %s gives", p.docs, f, from))
			}
		}
	}
	link, err := filepath.Rel(filepath.Dir(filepath.Join(g.root, s.file)), docs)
	if err != nil {
		return "", nil, err
	}
	slices.SortFunc(figures, func(a, b string) int {
		return slices.Index(reproduce.DocsFigures, a) - slices.Index(reproduce.DocsFigures, b)
	})
	return reproduce.DocsSection(&res, p.command, p.docs, filepath.ToSlash(link), slices.Compact(figures)), diffs, nil
}
