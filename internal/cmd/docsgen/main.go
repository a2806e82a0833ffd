// Command docsgen writes every generated section of the repository's Markdown files, and the
// figures they show, from the results kept under docs/, so that no figure in the docs is
// typed (`make docs`). Each section sits between the markers of package docsections, and the
// sections variable below says which file holds it and what it is made from.
//
// --check writes nothing and exits 1 when any section in any Markdown file, or a drawn figure,
// is not what its results give, when a file holds a section that is not one of these, or
// when a section is in another file than its own. A fresh run directory's results (--demo,
// --gpu) are checked for their figures: the machine, wall time and build the docs state are
// the kept results' own (a fresh run of the same code differs in those alone). Figures are
// drawn from results.json alone, except the t-SNE, which needs the embeddings and is copied
// from the run directory's plots.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/dcl-beam/dcl-beam/internal/docsections"
	"github.com/dcl-beam/dcl-beam/internal/storage"
)

// section is one generated section: the file that holds it and how its text is made.
type section struct {
	name string // its markers' name
	file string // the Markdown file that holds it, relative to the root
	// text makes the section's text from what is kept under the root (and a run directory
	// the flags name); checking, it also returns an error for each drawn figure that is not
	// the kept one.
	text func(ctx context.Context, g *generator, s section) (string, []error, error)
}

// sections are every generated section of the repository's docs.
var sections = []section{
	{name: "demo", file: "README.md", text: demoSection},
	{name: "gpu-experiment", file: "docs/gpu.md", text: gpuExperimentSection},
	{name: "gpu-check-summary", file: "docs/gpu.md", text: gpuCheckSummary},
	{name: "scale-on-paper", file: "docs/gpu.md", text: scaleSection},
	{name: "gpu-check-tables", file: "BENCHMARKS.md", text: gpuCheckTables},
	{name: "reproduce-stages", file: "BENCHMARKS.md", text: stageTimesSection},
	{name: "reliability-claims", file: "docs/reliability.md", text: reliabilitySection},
	{name: "kill-hunt", file: "docs/reliability.md", text: killHuntSection},
	{name: "storage", file: "docs/preprocessing.md", text: storageSection},
	{name: "config-keys", file: "docs/configs.md", text: configKeysSection},
	{name: "cpu-compare-tables", file: "BENCHMARKS.md", text: cpuCompareTables},
	{name: "cpu-compare-summary", file: "docs/engine.md", text: cpuCompareSummary},
}

// generator is one run of the program: where the repository is, the run directories whose
// fresh results to use, and whether to write or check.
type generator struct {
	root      string
	demo, gpu string
	check     bool
}

func main() {
	if err := run(context.Background(), os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "docsgen:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("docsgen", flag.ContinueOnError)
	var g generator
	fs.StringVar(&g.root, "root", ".", "the repository's root: README.md, BENCHMARKS.md and docs/ are there")
	fs.StringVar(&g.demo, "demo", "demo-out", "the demo's run directory (`make demo`'s output); skipped when it has no results.json")
	fs.StringVar(&g.gpu, "gpu", "", "a run directory of the GPU experiment (unpacked experiment-state.tgz)")
	fs.BoolVar(&g.check, "check", false, "write nothing; exit 1 when a generated section or a figure is not what its results give")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("takes no arguments, got %q", fs.Args())
	}
	problems, err := g.placement()
	if err != nil {
		return err
	}
	docs := map[string][]byte{} // each file's text as generated so far
	for _, s := range sections {
		doc, ok := docs[s.file]
		if !ok {
			if doc, err = os.ReadFile(filepath.Join(g.root, s.file)); err != nil {
				return err
			}
		}
		text, figures, err := s.text(ctx, &g, s)
		if err != nil {
			return fmt.Errorf("section %s: %w", s.name, err)
		}
		problems = append(problems, figures...)
		if g.check {
			if err := docsections.Check(doc, s.name, text); err != nil {
				problems = append(problems, fmt.Errorf("%s: %w", s.file, err))
			}
			docs[s.file] = doc
			continue
		}
		if docs[s.file], err = docsections.Splice(doc, s.name, text); err != nil {
			return fmt.Errorf("%s: %w", s.file, err)
		}
	}
	if err := errors.Join(problems...); err != nil {
		if g.check {
			return fmt.Errorf("%w\n(`make docs` rewrites the sections from the results)", err)
		}
		return err
	}
	if g.check {
		return nil
	}
	for _, f := range slices.Sorted(maps.Keys(docs)) {
		path := filepath.Join(g.root, f)
		was, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !bytes.Equal(docs[f], was) {
			if err := storage.WriteFile(ctx, path, docs[f]); err != nil {
				return err
			}
		}
	}
	return nil
}

// placement reads the markers of every Markdown file under the root (outside hidden folders,
// third_party/ and the outputs the Makefile and the demo write) and returns a problem for
// each malformed marker, each section that is not one of sections, and each that sits in
// another file than its own or twice.
func (g *generator) placement() ([]error, error) {
	home := map[string]string{}
	for _, s := range sections {
		home[s.name] = s.file
	}
	skip := map[string]bool{"third_party": true, "bin": true, "demo-out": true, "runs": true}
	var problems []error
	seen := map[string]string{}
	err := filepath.WalkDir(g.root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(g.root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || skip[rel]) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(d.Name(), ".md") {
			return nil
		}
		doc, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		names, err := docsections.Names(doc)
		if err != nil {
			problems = append(problems, fmt.Errorf("%s: %w", rel, err))
			return nil
		}
		for _, n := range names {
			switch want, ok := home[n]; {
			case !ok:
				problems = append(problems, fmt.Errorf("%s: no generated section is called %q (internal/cmd/docsgen lists them)", rel, n))
			case want != rel:
				problems = append(problems, fmt.Errorf("%s: section %q belongs in %s", rel, n, want))
			case seen[n] != "":
				problems = append(problems, fmt.Errorf("%s: section %q appears twice", rel, n))
			}
			seen[n] = rel
		}
		return nil
	})
	return problems, err
}
