package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/dcl-beam/dcl-beam/analysis"
	"github.com/dcl-beam/dcl-beam/pipelines"
	"github.com/dcl-beam/dcl-beam/trainstep"
)

// The evaluation subcommands: embed, knn, linear and npc build Beam pipelines (package
// pipelines) and print their result as one JSON document on stdout. Like preprocess, they
// keep Beam's and prism's informational logs out of stderr (quietBeamLogs) and report a
// failed job in one line.

func embedCommand() *command {
	return &command{
		name:    "embed",
		summary: "compute embeddings of a dataset with a trained encoder (Beam)",
		beam:    true,
		setup: func(fs *flag.FlagSet, out streams) func(context.Context, []string) error {
			checkpoint := fs.String("checkpoint", "", "checkpoint file, or a training run's folder for its newest checkpoint (local or gs://); required")
			data := fs.String("input", "", "shard folder written by 'dcl preprocess' (--augment=none for evaluation); required")
			output := fs.String("output", "", "embeddings to write: a folder (part files and embeddings.json) or one .parquet file; required")
			renamedFlag(fs, out, "data", "input")
			feature := fs.String("feature", string(trainstep.Backbone), "backbone (kNN, linear probe) or projection (NPC statistics)")
			views := fs.Int("views", 1, "1: view 1 of each row; 2: both views of pair shards, concatenated (the input of 'dcl npc')")
			pass := fs.Int("pass", 0, "augmented pass of the shards to embed; -1: every pass")
			batch := fs.Int("batch-size", trainstep.EncoderMaxBatch, "images per encoder call")
			parts := fs.Int("parts", 0, "embedding files to write (0: about one per 16,384 rows)")
			threads := fs.Int("threads", 0, "goroutines of each worker's CPU encoder (0: all cores)")
			progressOptions := addProgressFlags(fs)
			return func(ctx context.Context, args []string) error {
				if len(args) > 0 {
					return usagef("takes no positional arguments, got %q", args)
				}
				if *checkpoint == "" || *data == "" || *output == "" {
					return usagef("--checkpoint, --input and --output are required")
				}
				display, err := progressOptions(out)
				if err != nil {
					return err
				}
				f, err := trainstep.ParseFeature(*feature)
				if err != nil {
					return usagef("--feature: %v", err)
				}
				job, err := pipelines.PlanEmbed(ctx, pipelines.EmbedOptions{
					Checkpoint: *checkpoint, Data: *data, Output: *output, Feature: f, Views: *views,
					Pass: *pass, BatchSize: *batch, Parts: *parts, Threads: *threads,
				})
				if err != nil {
					return err
				}
				job.Display = display
				res, err := pipelines.RunEmbed(ctx, job)
				if err != nil || res == nil {
					return submitted(err, *output)
				}
				return printJSON(out, res)
			}
		},
	}
}

func knnCommand() *command {
	return &command{
		name:    "knn",
		summary: "weighted kNN accuracy of test embeddings against train embeddings (Beam)",
		beam:    true,
		setup: func(fs *flag.FlagSet, out streams) func(context.Context, []string) error {
			train := fs.String("train", "", "training embeddings (the bank): a .parquet file or a 'dcl embed' folder; required")
			test := fs.String("test", "", "test embeddings (the queries); required")
			def := analysis.DefaultKNNConfig()
			k := fs.Int("k", def.K, "neighbours that vote")
			temperature := fs.Float64("temperature", def.Temperature, "vote weight exp(similarity/T)")
			metric := fs.String("metric", def.Metric.String(), "similarity: cosine, dot or euclidean (-|a-b|²)")
			classes := fs.Int("num-classes", 0, "class count (0: from the embeddings' dataset, else the largest label + 1)")
			perClass := fs.Bool("per-class", false, "include per-class accuracies in the result")
			queryBlock := fs.Int("query-block", pipelines.DefaultQueryBlock, "test queries per work item (each reads its bank group once, with every core of its worker)")
			bankGroups := fs.Int("bank-groups", 1, "split the training files into this many groups searched in parallel per query block")
			bankBlock := fs.Int("bank-block", pipelines.DefaultBankBlock, "training rows read and searched at once")
			output := fs.String("output", "", "also write the result JSON here (needed, on shared storage, with remote runners)")
			progressOptions := addProgressFlags(fs)
			return func(ctx context.Context, args []string) error {
				if len(args) > 0 {
					return usagef("takes no positional arguments, got %q", args)
				}
				if *train == "" || *test == "" {
					return usagef("--train and --test are required")
				}
				display, err := progressOptions(out)
				if err != nil {
					return err
				}
				m, err := analysis.ParseMetric(*metric)
				if err != nil {
					return usagef("--metric: %v", err)
				}
				if *k < 1 || !(*temperature > 0) {
					return usagef("--k=%d and --temperature=%v: want k ≥ 1 and a positive temperature", *k, *temperature)
				}
				job, err := pipelines.PlanKNN(ctx, pipelines.KNNOptions{
					Train: *train, Test: *test, K: *k, Temperature: *temperature, Metric: m, NumClasses: *classes,
					QueryBlock: *queryBlock, BankGroups: *bankGroups, BankBlock: *bankBlock, Output: *output, PerClass: *perClass,
				})
				if err != nil {
					return err
				}
				job.Display = display
				res, err := pipelines.RunKNN(ctx, job)
				if err != nil || res == nil {
					return submitted(err, *output)
				}
				return printJSON(out, res)
			}
		},
	}
}

func linearCommand() *command {
	return &command{
		name:    "linear",
		summary: "linear-probe accuracy on frozen embeddings (Beam, one worker)",
		beam:    true,
		setup: func(fs *flag.FlagSet, out streams) func(context.Context, []string) error {
			def, lars := analysis.DefaultLinearConfig(), analysis.LARSLinearConfig()
			train := fs.String("train", "", "training embeddings: a .parquet file or a 'dcl embed' folder; required")
			test := fs.String("test", "", "test embeddings; required")
			optimizer := fs.String("optimizer", "sgd", "sgd: the OpenSelfSup protocol; lars: the SimSiam-style one (its own defaults below)")
			epochs := fs.Int("probe-epochs", def.Epochs, fmt.Sprintf("epochs of the probe's training (lars: %d)", lars.Epochs))
			renamedFlag(fs, out, "epochs", "probe-epochs")
			batch := fs.Int("batch-size", def.BatchSize, fmt.Sprintf("batch size (lars: %d)", lars.BatchSize))
			lr := fs.Float64("lr", def.LR, fmt.Sprintf("learning rate (lars: %g)", lars.LR))
			momentum := fs.Float64("momentum", def.Momentum, "momentum")
			wd := fs.Float64("weight-decay", def.WeightDecay, "weight decay (weights only)")
			schedule := fs.String("schedule", string(def.Schedule), "step (×gamma at each milestone) or cosine (lars: cosine)")
			milestones := fs.String("milestones", "60,80", "epochs of the step schedule's decays (with --probe-epochs alone: scaled to the same fractions)")
			gamma := fs.Float64("gamma", def.Gamma, "the step schedule's factor")
			trust := fs.Float64("trust", lars.TrustCoefficient, "LARS trust coefficient η")
			standardize := fs.Bool("standardize", false, "scale features to zero mean and unit variance with the training set's statistics (not the protocol's default)")
			seed := fs.Uint64("seed", 0, "seed of the initial weights and the shuffles (same seed, same result)")
			classes := fs.Int("num-classes", 0, "class count (0: from the embeddings' dataset, else the largest label + 1)")
			perClass := fs.Bool("per-class", false, "include per-class accuracies in the result")
			model := fs.String("model", "", "write the trained classifier (JSON) here")
			output := fs.String("output", "", "also write the result JSON here (needed, on shared storage, with remote runners)")
			progressOptions := addProgressFlags(fs)
			return func(ctx context.Context, args []string) error {
				if len(args) > 0 {
					return usagef("takes no positional arguments, got %q", args)
				}
				if *train == "" || *test == "" {
					return usagef("--train and --test are required")
				}
				display, err := progressOptions(out)
				if err != nil {
					return err
				}
				opt, err := analysis.ParseOptimizer(*optimizer)
				if err != nil {
					return usagef("--optimizer: %v", err)
				}
				cfg := def
				if opt == analysis.LARS {
					cfg = lars
				}
				set := map[string]bool{}
				fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
				// Flags given on the command line override the protocol's defaults.
				if set["probe-epochs"] {
					cfg = cfg.WithEpochs(*epochs)
				}
				if set["batch-size"] {
					cfg.BatchSize = *batch
				}
				if set["lr"] {
					cfg.LR = *lr
				}
				if set["schedule"] {
					cfg.Schedule = analysis.Schedule(*schedule)
				}
				if set["milestones"] {
					if cfg.Milestones, err = parseInts(*milestones); err != nil {
						return usagef("--milestones: %v", err)
					}
				}
				if set["gamma"] {
					cfg.Gamma = *gamma
				}
				if set["trust"] {
					cfg.TrustCoefficient = *trust
				}
				cfg.Momentum, cfg.WeightDecay, cfg.Standardize, cfg.Seed, cfg.NumClasses = *momentum, *wd, *standardize, *seed, *classes
				if err := cfg.Validate(); err != nil {
					return usagef("%w", err)
				}
				job, err := pipelines.PlanLinear(ctx, pipelines.LinearOptions{
					Train: *train, Test: *test, Config: cfg, Output: *output, Model: *model, PerClass: *perClass,
				})
				if err != nil {
					return err
				}
				job.Display = display
				res, err := pipelines.RunLinear(ctx, job)
				if err != nil || res == nil {
					return submitted(err, *output)
				}
				return printJSON(out, res)
			}
		},
	}
}

// npcSummary is what `dcl npc` prints: the headline numbers; the report files hold the rest.
type npcSummary struct {
	Output      string          `json:"output"`
	Name        string          `json:"name"`
	Temperature float64         `json:"temperature"`
	Pairs       int             `json:"pairs"`
	Stats       []npcSummaryRow `json:"stats"`
}

type npcSummaryRow struct {
	BatchSize int     `json:"batch_size"`
	Anchors   int64   `json:"anchors"`
	Mean      float64 `json:"mean"`
	Std       float64 `json:"std"`
	CV        float64 `json:"cv"`
}

func npcCommand() *command {
	return &command{
		name:    "npc",
		summary: "negative-positive coupling statistics over batch sizes, the paper's Fig. 1 (Beam)",
		beam:    true,
		setup: func(fs *flag.FlagSet, out streams) func(context.Context, []string) error {
			embeddings := fs.String("input", "", "projection embeddings of view pairs ('dcl embed --feature=projection --views=2' over augmented shards); required")
			renamedFlag(fs, out, "embeddings", "input")
			sizes := fs.String("batch-sizes", "", "batch sizes to sample (default: those of "+joinInts(analysis.DefaultNPCBatchSizes())+
				" the view pairs allow, saying which it leaves out; a size given here that is larger than the pairs fails)")
			temperature := fs.Float64("temperature", 0, "τ of the loss (0: the one the encoder was trained with, from the embeddings' metadata)")
			seed := fs.Uint64("seed", 1, "seed of the batches")
			passes := fs.Int("passes", 1, "shuffled passes over the pairs per batch size")
			maxBatches := fs.Int("max-batches", 0, "at most this many batches per batch size (0: all)")
			bins := fs.Int("bins", analysis.DefaultHistogramBins, "histogram bins on [0, 1]")
			name := fs.String("name", "", "series name in the table and plots (default τ=…)")
			concatenated := fs.Bool("concatenated", false, "accept a file without dcl metadata whose rows are view 1's vector followed by view 2's")
			output := fs.String("output", "", "folder for npc.json, npc.md and the PNG figures (local or gs://); required")
			progressOptions := addProgressFlags(fs)
			return func(ctx context.Context, args []string) error {
				if len(args) > 0 {
					return usagef("takes no positional arguments, got %q", args)
				}
				if *embeddings == "" || *output == "" {
					return usagef("--input and --output are required")
				}
				display, err := progressOptions(out)
				if err != nil {
					return err
				}
				var bs []int // nil: the defaults the data allows
				if *sizes != "" {
					if bs, err = parseInts(*sizes); err != nil || len(bs) == 0 {
						return usagef("--batch-sizes=%q: want a comma-separated list of sizes", *sizes)
					}
				}
				job, err := pipelines.PlanNPC(ctx, pipelines.NPCOptions{
					Embeddings: *embeddings, Concatenated: *concatenated, BatchSizes: bs, Temperature: *temperature,
					Seed: *seed, Passes: *passes, MaxBatches: *maxBatches, Bins: *bins, Name: *name, Output: *output,
				})
				if err != nil {
					return err
				}
				job.Display = display
				if len(job.LeftOut) > 0 {
					fmt.Fprintf(out.stderr, "dcl npc: left out the default batch sizes %s: %s holds %d view pairs (--batch-sizes chooses)\n",
						joinInts(job.LeftOut), *embeddings, job.Pairs)
				}
				rep, err := pipelines.RunNPC(ctx, job)
				if err != nil || rep == nil {
					return submitted(err, *output)
				}
				sum := npcSummary{Output: *output, Name: rep.Name, Temperature: rep.Temperature, Pairs: rep.Pairs}
				for _, s := range rep.Stats {
					sum.Stats = append(sum.Stats, npcSummaryRow{BatchSize: s.BatchSize, Anchors: s.Anchors, Mean: s.Mean, Std: s.Std, CV: s.CV})
				}
				return printJSON(out, sum)
			}
		},
	}
}

// submitted passes err on; without one the job was only translated (--dry_run) or submitted
// (--async), which it says on stderr.
func submitted(err error, output string) error {
	if err == nil {
		slog.Info("job translated or submitted, not run here; its result will be written to --output", "output", output)
	}
	return err
}

func printJSON(out streams, v any) error {
	return json.NewEncoder(out.stdout).Encode(v)
}

// parseInts reads a comma-separated list of integers.
func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		v, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("%q is not a whole number", f)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, errors.New("empty list")
	}
	return out, nil
}

// joinInts writes sizes as a --batch-sizes value: 32,64,128.
func joinInts(sizes []int) string {
	parts := make([]string, len(sizes))
	for i, s := range sizes {
		parts[i] = strconv.Itoa(s)
	}
	return strings.Join(parts, ",")
}
