package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/pipelines"
	"github.com/dcl-beam/dcl-beam/shards"
	"github.com/dcl-beam/dcl-beam/transforms/augment"
	"github.com/dcl-beam/dcl-beam/transforms/datasets"
)

func preprocessCommand() *command {
	return &command{
		name:    "preprocess",
		summary: "read a dataset, augment it and write Parquet shards of view pairs (Beam)",
		beam:    true,
		setup:   setupPreprocess,
	}
}

func setupPreprocess(fs *flag.FlagSet, out streams) func(context.Context, []string) error {
	dataset := fs.String("dataset", "", "dataset: "+strings.Join(datasets.Names(), ", "))
	input := fs.String("input", "", "where the dataset lies (local or gs://): the folder of the published files, a glob of\n"+
		"CIFAR .bin files or ImageNet class tars, ImageNet's outer train tar, or a folder of class folders")
	output := fs.String("output", "", "dataset directory to write (local or gs://): shards, manifest.json, dead-letters.jsonl; required")
	split := fs.String("split", "train", "split: train or test (CIFAR, IDX), train, test, unlabeled or train+unlabeled (STL-10),\n"+
		"train or val (ImageNet); for folder, any name (it prefixes the keys)")
	preset := fs.String("augment", "", "augmentation preset: "+strings.Join(augment.Presets(), ", ")+
		"; none writes evaluation shards\n(one centred view per image); empty: the dataset's ("+
		datasets.Describe(func(d datasets.Descriptor) string { return d.Augment })+")")
	epochs := fs.Int("passes", 1, "augmented passes E: each writes one row (two views) per image; training epoch e reads pass e mod E")
	renamedFlag(fs, out, "epochs", "passes")
	views := fs.String("views", "offline", "offline: store --passes augmented passes of view pairs; online: store each image once\n"+
		"(decoded pixels for CIFAR, STL-10 and IDX, the published JPEG or PNG for image files) and let 'dcl train'\n"+
		"make every epoch's views on the fly, the same bytes as pass e of stored views")
	maxSide := fs.Int("max-side", 0, "shrink images whose longer side is larger to this many pixels before cutting views\n"+
		"(as FFCV's max_resolution; both modes); 0 keeps every image as published")
	seed := fs.Uint64("seed", 1, "seed of the augmentations and of the rows' order in the shards")
	parts := fs.Int("shards", 0, fmt.Sprintf("shards per pass (0: about one per %d MiB of output)", pipelines.DefaultShardBytes>>20))
	encoding := fs.String("encoding", "", "view encoding: raw, png or jpeg; empty: raw up to 96 px, jpeg above")
	size := fs.Int("size", 0, "view side in pixels; 0: the dataset's ("+
		datasets.Describe(func(d datasets.Descriptor) string { return strconv.Itoa(d.ViewSize) })+");\nthe same as --view-size")
	channels := fs.Int("channels", 0, "view channels, 1 or 3; 0: the dataset's ("+
		datasets.Describe(func(d datasets.Descriptor) string { return strconv.Itoa(d.Channels) })+"; sources with the other count are converted)")
	limit := fs.Int64("limit", 0, "keep only the first N records of the split, in the dataset's order (files as published,\n"+
		"folders by class then file name); 0 keeps all. Not for ImageNet tars")
	maxBad := fs.Float64("max-bad-fraction", 0, "largest share of unusable records (dead letters) a run accepts; above it the run fails\nafter writing dead-letters.jsonl, without a manifest")
	overwrite := fs.Bool("overwrite", false, "replace a dataset of another configuration in --output")
	coarse := fs.Bool("coarse-labels", false, "CIFAR-100: the 20 coarse labels instead of the 100 fine ones")
	labelsFile := fs.String("labels-file", "", "ImageNet val as a flat folder: its labels file; empty: LOC_val_solution.csv in or beside it, or at the dataset root")
	unitRecords := fs.Int("unit-records", 0, fmt.Sprintf("records (or image files) per unit of reading work (0: %d)", datasets.DefaultUnitRecords))
	maxPixels := fs.Int64("max-pixels", 0, fmt.Sprintf("largest image (width × height) decoded; larger ones are dead letters (0: %d)", datasets.DefaultMaxPixels))
	progressOptions := addProgressFlags(fs)
	overrides := augment.RegisterFlags(fs, "")

	return func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return usagef("takes no positional arguments, got %q", args)
		}
		if *dataset == "" || *input == "" || *output == "" {
			return usagef("--dataset, --input and --output are required")
		}
		spec, desc, err := datasets.Spec{Dataset: *dataset, Input: *input, Split: *split, CoarseLabels: *coarse,
			LabelsFile: *labelsFile, UnitRecords: *unitRecords, Limits: datasets.Limits{MaxPixels: *maxPixels}}.Resolve()
		if err != nil {
			return usagef("--dataset=%q: want one of %s", *dataset, strings.Join(datasets.Names(), ", "))
		}
		aug, err := pipelines.PreprocessAugment(desc, *preset, *size, overrides.List())
		if err != nil {
			return usagef("%w", err)
		}
		if *size != 0 && aug.Size != *size {
			return usagef("--size=%d and --view-size=%d disagree: give one", *size, aug.Size)
		}
		online := false
		switch *views {
		case "offline":
		case "online":
			online = true
			if aug.Eval {
				return usagef("--views=online makes augmented view pairs: --augment=%s has no random views", aug.Preset)
			}
			if flagGiven(fs, "passes") || flagGiven(fs, "epochs") {
				return usagef("--views=online stores no passes (the trainer makes a fresh one every epoch): drop --passes")
			}
		default:
			return usagef("--views=%q: want offline or online", *views)
		}
		if *maxSide < 0 {
			return usagef("--max-side=%d: want 0 (keep images as published) or more", *maxSide)
		}
		if aug.Eval && *epochs != 1 {
			return usagef("--augment=none writes evaluation shards, one pass: drop --passes=%d", *epochs)
		}
		var enc shards.Encoding
		if *encoding != "" {
			if enc, err = shards.ParseEncoding(*encoding); err != nil {
				return usagef("--encoding: %v", err)
			}
		}
		switch {
		case *epochs < 1:
			return usagef("--passes=%d: want at least 1", *epochs)
		case *parts < 0 || *parts > 99999:
			return usagef("--shards=%d: want 1 to 99999, or 0 to choose from the dataset's size", *parts)
		case *channels != 0 && *channels != 1 && *channels != 3:
			return usagef("--channels=%d: want 1 or 3", *channels)
		case *limit < 0:
			return usagef("--limit=%d: want 0 (all records) or more", *limit)
		case !(*maxBad >= 0 && *maxBad <= 1):
			return usagef("--max-bad-fraction=%g: want a number from 0 to 1", *maxBad)
		case *unitRecords < 0 || *maxPixels < 0:
			return usagef("--unit-records and --max-pixels must not be negative")
		}
		display, err := progressOptions(out)
		if err != nil {
			return err
		}

		opts := pipelines.PreprocessOptions{
			Spec: spec, Output: *output, Augment: aug, Passes: *epochs, Online: online, MaxSide: *maxSide, Seed: *seed, Parts: *parts, Encoding: enc,
			Channels: *channels, Limit: *limit, MaxBadFraction: *maxBad, Overwrite: *overwrite,
			CodeVersion: codeVersion(), Progress: display,
		}
		job, err := pipelines.PlanPreprocess(ctx, opts)
		if err != nil {
			return err
		}
		res, err := pipelines.RunPreprocess(ctx, job)
		if err != nil {
			return err
		}
		if m := res.Manifest; m != nil && m.DeadLetters.Count > 0 {
			slog.Warn("some records could not be used; they are listed with their reasons",
				"dead_letters", m.DeadLetters.Count, "file", storage.Join(*output, m.DeadLetters.File))
		}
		summary := out.stdout
		if res.DryRun {
			summary = out.stderr // stdout holds the translated job
		}
		fmt.Fprintln(summary, res.Summary(*output))
		return nil
	}
}

// flagGiven reports whether the command line set the flag.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}
