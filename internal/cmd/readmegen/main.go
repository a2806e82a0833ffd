// Command readmegen writes the README's generated sections and their figures from the
// reproductions' results.json files, so that no figure in the README is typed (`make readme`):
//
//   - the demo section, from the demo's run directory (--demo, default demo-out: `make demo`'s
//     output), whose results.json is kept as docs/demo/results.json beside the figures; without
//     one there, from docs/demo/results.json as it is;
//   - the GPU section, from a run directory of experiments/fashion-mnist-gpu.yaml (--gpu: what
//     scripts/gpu-check.sh's part "experiment" sends back, unpacked), kept as
//     docs/gpu-experiment/ (docs/gpu/ holds the GPU check's figures); without either, a line
//     saying that no GPU run exists yet and the command that makes one;
//   - the reliability section's kill-hunt figures, from the hunts kept in docs/reliability/
//     (kill-seed-N.json, written by cmd/dcl's kill test with DCL_KILL_RESULTS=docs/reliability);
//   - the storage table of the built-in configs (stored views against base shards), from
//     docs/storage/storage.json (experiments.StorageFile, written by experiments'
//     TestStorageFigures with -update-storage).
//
// --check writes nothing and exits 1 when the README or a drawn figure is not what the results
// give (checked against a run directory's fresh results, the machine, wall time and build the
// README states are the kept results': a fresh run of the same code differs in those alone).
// Figures are drawn from results.json alone, except the t-SNE, which needs the embeddings and
// is copied from the run directory's plots.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/reproduce"
)

// section is one generated part of the README: where its results are kept and how it is
// made.
type section struct {
	name    string // the marker name
	file    string // the document that holds it, relative to the root
	docs    string // its folder under the root: results.json and the figures
	command string // what produced the results, as the README names it
	// none is the section's text while there are no results.
	none string
}

var sections = []section{
	{name: "demo", file: "README.md", docs: "docs/demo", command: "make demo",
		none: "No demo results yet: run `make demo`, then `make readme`."},
	{name: "gpu", file: "docs/gpu.md", docs: "docs/gpu-experiment", command: "scripts/gpu-check.sh OUT experiment",
		none: "No GPU run of `experiments/fashion-mnist-gpu.yaml` has finished yet. On a machine with an NVIDIA " +
			"GPU: `make gpu-pack` here, then `scripts/gpu-check.sh OUT experiment` there (above); unpack " +
			"`OUT/experiment-state.tgz` into a folder and run `make readme GPU_RUN=that-folder` to put its report here."},
}

func main() {
	if err := run(context.Background(), os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "readmegen:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("readmegen", flag.ContinueOnError)
	root := fs.String("root", ".", "the repository's root: README.md and docs/ are there")
	demo := fs.String("demo", "demo-out", "the demo's run directory (`make demo`'s output); skipped when it has no results.json")
	gpu := fs.String("gpu", "", "a run directory of the GPU experiment (unpacked experiment-state.tgz)")
	check := fs.Bool("check", false, "write nothing; exit 1 when the README or a figure is not what the results give")
	if err := fs.Parse(args); err != nil {
		return err
	}
	docs := map[string][]byte{} // each file's text as generated so far
	var stale []error
	splice := func(file, name, text string) error {
		path := filepath.Join(*root, file)
		doc, ok := docs[file]
		if !ok {
			var err error
			if doc, err = os.ReadFile(path); err != nil {
				return err
			}
			docs[file] = doc
		}
		if *check {
			if err := reproduce.CheckReadme(doc, name, text); err != nil {
				stale = append(stale, fmt.Errorf("%s: %w", file, err))
			}
			return nil
		}
		updated, err := reproduce.SpliceReadme(doc, name, text)
		if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		docs[file] = updated
		return nil
	}
	for _, s := range sections {
		src := map[string]string{"demo": *demo, "gpu": *gpu}[s.name]
		text, figures, err := generate(ctx, s, *root, src, *check)
		if err != nil {
			return fmt.Errorf("section %s: %w", s.name, err)
		}
		stale = append(stale, figures...)
		if err := splice(s.file, s.name, text); err != nil {
			return err
		}
	}
	kills, err := killHuntSection(ctx, *root)
	if err != nil {
		return fmt.Errorf("section %s: %w", killHuntName, err)
	}
	if err := splice(killHuntFile, killHuntName, kills); err != nil {
		return err
	}
	table, err := storageSection(ctx, *root)
	if err != nil {
		return fmt.Errorf("section %s: %w", storageName, err)
	}
	if err := splice(storageDocFile, storageName, table); err != nil {
		return err
	}
	if *check {
		if err := errors.Join(stale...); err != nil {
			return fmt.Errorf("%w\n(`make readme` rewrites them from the results)", err)
		}
		return nil
	}
	for file, updated := range docs {
		path := filepath.Join(*root, file)
		was, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Equal(updated, was) {
			continue
		}
		if err := storage.WriteFile(ctx, path, updated); err != nil {
			return err
		}
	}
	return nil
}

// generate returns a section's text from the results in src (a run directory) when it has
// them, else from those kept in its docs folder, else its placeholder. Unless checking, it
// keeps src's results and writes the figures; checking, it draws them into a temporary folder
// and returns a difference for each that is not the kept one.
func generate(ctx context.Context, s section, root, src string, check bool) (string, []error, error) {
	docs := filepath.Join(root, s.docs)
	kept := filepath.Join(docs, reproduce.ResultsName)
	from, runDir := kept, ""
	if src != "" {
		if _, err := os.Stat(filepath.Join(src, reproduce.ResultsName)); err == nil {
			from, runDir = filepath.Join(src, reproduce.ResultsName), src
		}
	}
	if _, err := os.Stat(from); errors.Is(err, os.ErrNotExist) {
		return s.none, nil, nil
	}
	var res reproduce.Results
	if err := storage.LoadJSON(ctx, from, &res); err != nil {
		return "", nil, err
	}
	if check && from != kept {
		// Fresh results are checked for their figures: where they ran, how long they took
		// and which build made them are the kept results' own, as the README states them.
		var was reproduce.Results
		if err := storage.LoadJSON(ctx, kept, &was); err == nil {
			res.Machine, res.Wall, res.CodeVersion = was.Machine, was.Wall, was.CodeVersion
		}
	}
	out := docs
	if check {
		tmp, err := os.MkdirTemp("", "readmegen-")
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
	figures, err := reproduce.WriteReadmeFigures(ctx, &res, runDir, out)
	if err != nil {
		return "", nil, err
	}
	if runDir == "" { // the t-SNE kept from an earlier run directory stays
		if _, err := os.Stat(filepath.Join(docs, reproduce.TSNEPlotName)); err == nil {
			figures = append(figures, reproduce.TSNEPlotName)
		}
	}
	var diffs []error
	if check {
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
				diffs = append(diffs, fmt.Errorf("%s/%s is not the figure %s gives", s.docs, f, from))
			}
		}
	}
	rel, err := filepath.Rel(filepath.Dir(filepath.Join(root, s.file)), docs)
	if err != nil {
		return "", nil, err
	}
	slices.SortFunc(figures, func(a, b string) int {
		return slices.Index(reproduce.ReadmeFigures, a) - slices.Index(reproduce.ReadmeFigures, b)
	})
	return reproduce.ReadmeSection(&res, s.command, filepath.ToSlash(rel), slices.Compact(figures)), diffs, nil
}
