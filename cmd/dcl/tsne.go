package main

import (
	"context"
	"flag"
	"strings"

	"github.com/dcl-beam/dcl-beam/analysis"
	"github.com/dcl-beam/dcl-beam/analysis/figures"
)

// listFlag collects a flag given several times; each value may also be a comma-separated
// list when split is set.
type listFlag struct {
	values []string
	split  bool
}

func (l *listFlag) String() string { return strings.Join(l.values, ",") }

func (l *listFlag) Set(s string) error {
	if !l.split {
		l.values = append(l.values, s)
		return nil
	}
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			l.values = append(l.values, v)
		}
	}
	return nil
}

func tsneCommand() *command {
	return &command{
		name:    "tsne",
		summary: "t-SNE of embeddings coloured by class, one panel per run side by side (the paper's Fig. 4c)",
		details: "Samples --per-class rows of each class from each embedding set (the same rows of sets embedded from the same shards), lays each sample out with exact t-SNE and writes one PNG.",
		setup: func(fs *flag.FlagSet, out streams) func(context.Context, []string) error {
			embeddings := &listFlag{split: true}
			fs.Var(embeddings, "input", "`paths` of the embeddings to lay out, each a .parquet file or a 'dcl embed' folder; repeat the flag or give a comma-separated list for side-by-side panels (required)")
			labels := &listFlag{}
			fs.Var(labels, "label", "`title` of each panel, in the order of --input (repeat the flag, or one comma-separated list); default: the paths")
			renamedFlag(fs, out, "embeddings", "input")
			def := analysis.DefaultTSNEConfig()
			output := fs.String("output", "", "the PNG to write, local or gs:// (required)")
			perClass := fs.Int("per-class", figures.DefaultTSNEPerClass, "rows sampled from each class of each set")
			classes := fs.Int("classes", figures.DefaultTSNEClasses, "lay out the first N classes only (0: every class; beyond about 20, colours and markers cannot be told apart)")
			seed := fs.Uint64("seed", def.Seed, "seed of the sample and of t-SNE's initial layout (same seed, same figure)")
			perplexity := fs.Float64("perplexity", def.Perplexity, "t-SNE perplexity: the effective number of neighbours")
			iterations := fs.Int("iterations", def.Iterations, "gradient-descent iterations (the first 250 with early exaggeration)")
			normalize := fs.Bool("normalize", def.Normalize, "L2-normalise the embeddings first (distances of the cosine similarity that kNN uses)")
			width := fs.Int("width", 640, "width of one panel in pixels")
			height := fs.Int("height", 520, "height of one panel in pixels")
			cols := fs.Int("cols", 0, "panels per row (0: all in one row)")
			return func(ctx context.Context, args []string) error {
				if len(args) > 0 {
					return usagef("takes no positional arguments, got %q", args)
				}
				if len(embeddings.values) == 0 || *output == "" {
					return usagef("--input and --output are required")
				}
				names := labels.values
				if len(names) == 1 && len(embeddings.values) > 1 {
					l := &listFlag{split: true}
					l.Set(names[0])
					names = l.values
				}
				cfg := def
				cfg.Seed, cfg.Perplexity, cfg.Iterations, cfg.Normalize = *seed, *perplexity, *iterations, *normalize
				cfg.ExaggerationIters = min(cfg.ExaggerationIters, cfg.Iterations)
				if !(cfg.Perplexity > 0) || cfg.Iterations < 1 {
					return usagef("--perplexity=%v and --iterations=%d: want a positive perplexity and at least one iteration", cfg.Perplexity, cfg.Iterations)
				}
				res, err := figures.TSNE(ctx, figures.TSNEOptions{
					Embeddings: embeddings.values, Labels: names, PerClass: *perClass, Classes: *classes, Config: cfg,
					Output: *output, Width: *width, Height: *height, Cols: *cols,
				})
				if err != nil {
					return err
				}
				return printJSON(out, res)
			}
		},
	}
}
