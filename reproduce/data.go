package reproduce

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/pipelines"
	"github.com/dcl-beam/dcl-beam/shards"
	"github.com/dcl-beam/dcl-beam/transforms/augment"
	"github.com/dcl-beam/dcl-beam/transforms/datasets"
)

// The three datasets of an experiment.
func (r *runner) pretrainDir() string  { return r.path(DataDir, "pretrain") }
func (r *runner) evalTrainDir() string { return r.path(DataDir, "eval-train") }
func (r *runner) evalTestDir() string  { return r.path(DataDir, "eval-test") }

// evalTrainCropsDir holds passes of augmented crops of the train split, for an evaluation
// that trains on them (the linear probe's augmented protocol).
func (r *runner) evalTrainCropsDir() string { return r.path(DataDir, "eval-train-crops") }

// cropPasses is how many passes of augmented crops of the train split the config's
// evaluations train on: the most any asks for (0: none).
func (r *runner) cropPasses() int {
	n := 0
	for _, ev := range pipelines.EncoderEvaluations() {
		if s, ok := r.cfg.Evaluate.Evaluations[ev.Name]; ok && ev.Encoder.CropPasses != nil {
			n = max(n, ev.Encoder.CropPasses(s))
		}
	}
	return n
}

// dataGen says which datasets were rewritten since the last complete reproduction:
// training depends on the pretraining pairs, the embeddings on the evaluation images (and
// NPC on the pairs too).
type dataGen struct{ pretrain, eval gen }

// prepareData writes the pretraining view pairs and the two evaluation datasets.
func (r *runner) prepareData(ctx context.Context) (dataGen, error) {
	d := r.cfg.Dataset
	spec, desc, err := datasets.Spec{Dataset: d.Name}.Resolve()
	if err != nil {
		return dataGen{}, err
	}
	pretrain, err := r.augmentConfig(desc, r.cfg.Preprocess.Augment, true)
	if err != nil {
		return dataGen{}, err
	}
	eval, err := r.augmentConfig(desc, augment.None, false)
	if err != nil {
		return dataGen{}, err
	}
	enc, err := shards.ParseEncoding(r.cfg.Preprocess.Encoding)
	if err != nil && r.cfg.Preprocess.Encoding != "" {
		return dataGen{}, err
	}
	sets := []*dataSet{
		{role: "pretrain", split: cmp.Or(d.PretrainSplit, "train"), dir: r.pretrainDir(), aug: pretrain, passes: max(1, r.cfg.Preprocess.Passes), limit: d.Limit,
			online: r.cfg.Preprocess.Views == "online"},
		{role: "eval-train", split: cmp.Or(d.TrainSplit, "train"), dir: r.evalTrainDir(), aug: eval, passes: 1, limit: d.EvalLimit},
		{role: "eval-test", split: cmp.Or(d.TestSplit, "test"), dir: r.evalTestDir(), aug: eval, passes: 1, limit: d.EvalLimit},
	}
	if passes := r.cropPasses(); passes > 0 {
		crops, err := r.augmentConfig(desc, augment.CropFlip, false)
		if err != nil {
			return dataGen{}, err
		}
		// A pass stores a pair of crops of each image: both are embedded, two passes of the
		// probe's.
		sets = append(sets, &dataSet{role: "eval-train-crops", split: cmp.Or(d.TrainSplit, "train"), dir: r.evalTrainCropsDir(), aug: crops,
			passes: (passes + 1) / 2, limit: d.EvalLimit})
	}
	for _, ds := range sets {
		spec.Input, spec.Split = d.SplitInput(ds.split), ds.split
		ds.job, err = pipelines.PlanPreprocess(ctx, pipelines.PreprocessOptions{
			Spec:   spec,
			Output: ds.dir, Augment: ds.aug, Passes: ds.passes, Seed: r.cfg.Preprocess.Seed, MaxSide: r.cfg.Preprocess.MaxSide,
			Online: ds.online,
			Parts:  r.cfg.Preprocess.Shards, Encoding: enc, Limit: int64(ds.limit), CodeVersion: r.opts.CodeVersion,
			Progress: r.opts.Progress,
		})
		if err != nil {
			return dataGen{}, fmt.Errorf("preprocess %s: %w", ds.role, err)
		}
	}
	// Before anything is written: the test split must not read what the encoder trains on or
	// the kNN bank and the probe learn from.
	testSet := sets[2]
	for _, ds := range slices.Concat(sets[:2], sets[3:]) {
		if a, b, ok := datasets.SharedSource(testSet.job.Plan.Sources(), ds.job.Plan.Sources()); ok {
			return dataGen{}, sharedSourceError(testSet, ds, a, b, "would read")
		}
	}
	var data dataGen
	for _, ds := range sets {
		job := ds.job
		var writes int64
		if r.plan {
			if writes, err = job.StorageEstimate(ctx); err != nil {
				return dataGen{}, fmt.Errorf("preprocess %s: %w", ds.role, err)
			}
		}
		g, err := r.stage(ctx, stageSpec{kind: StagePreprocess, name: "preprocess " + ds.role, writes: writes,
			done: func() (outcome, error) { return r.sameDataset(ctx, ds.dir, job.Config) },
			do: func() error {
				// Whatever is in the folder is this run directory's own: a partial output
				// (perhaps of an earlier build, whose version its shards record), or one
				// that is being redone. Preparing the folder removes the manifest first.
				job.Overwrite = true
				res, err := pipelines.RunPreprocess(ctx, job)
				if err != nil {
					return err
				}
				if res.Manifest == nil {
					return errors.New("the preprocessing job was only submitted or translated (--async or --dry_run): reproduce needs its shards")
				}
				r.log.Info(res.Summary(ds.dir))
				return nil
			},
			digest: func() (string, error) { return datasetDigest(ctx, ds.dir) }})
		if err != nil {
			return dataGen{}, err
		}
		if ds.dir == r.pretrainDir() {
			data.pretrain = max(data.pretrain, g)
		} else {
			data.eval = max(data.eval, g)
		}
	}
	if !r.plan {
		if err := checkDisjoint(ctx, sets); err != nil {
			return dataGen{}, err
		}
	}
	if classes, err := datasets.ClassNames(d.Name, false); err == nil {
		r.numClasses = len(classes)
		return data, nil
	}
	if r.plan {
		return data, nil // the evaluations that need the class count do not run
	}
	// A dataset without a fixed class list (idx, folder): the class list its manifests carry,
	// else one more than the largest label of either evaluation split, which a class absent
	// from one split cannot shrink. (kNN and linear refuse splits whose lists differ.)
	n := 0
	for _, dir := range []string{r.evalTrainDir(), r.evalTestDir()} {
		m, err := shards.ReadManifest(ctx, dir)
		if err != nil {
			return dataGen{}, err
		}
		n = max(n, len(m.Config.Classes))
		for label := range m.Labels {
			n = max(n, int(label)+1)
		}
	}
	r.numClasses = n
	return data, nil
}

// dataSet is one of the three datasets of an experiment.
type dataSet struct {
	role, split, dir string
	aug              augment.Config
	passes, limit    int
	online           bool // base shards: the trainer makes the views (preprocess.views online)
	job              *pipelines.PreprocessJob
}

// sharedSourceError is the one line that refuses a test split sharing images with a split
// the encoder or the evaluations learn from.
func sharedSourceError(test, other *dataSet, inTest, inOther, verb string) error {
	return fmt.Errorf("dataset: the %s split (%s) %s %s, which the %s split (%s) reads too (%s): "+
		"give the dataset root that holds each split in its own place, or each split its own dataset.inputs entry",
		test.split, test.role, verb, inTest, other.split, other.role, inOther)
}

// checkDisjoint refuses to evaluate on a test set whose manifest names a file or folder
// that the pretraining or evaluation-training manifests name too (or one under it), and a
// test manifest that names none (written before manifests recorded their sources), whatever
// made the datasets: this call, an earlier one, or dcl preprocess by hand.
func checkDisjoint(ctx context.Context, sets []*dataSet) error {
	sources := make([][]string, len(sets))
	for i, ds := range sets {
		m, err := shards.ReadManifest(ctx, ds.dir)
		if err != nil {
			return err
		}
		for _, s := range m.Config.Sources {
			sources[i] = append(sources[i], s.Name)
		}
		if len(sources[i]) == 0 {
			return fmt.Errorf("%s records no sources (it was written before manifests named the files each split read), so its split cannot be checked against the others: pass --rerun=preprocess",
				storage.Join(ds.dir, shards.ManifestName))
		}
	}
	for i := range sets {
		if i == 2 {
			continue // the test split itself
		}
		if a, b, ok := datasets.SharedSource(sources[2], sources[i]); ok {
			return sharedSourceError(sets[2], sets[i], a, b, "read")
		}
	}
	return nil
}

// datasetDigest identifies a dataset by its shards' checksums: preprocessing is
// deterministic, so a dataset made again from the same input and settings has the same one.
func datasetDigest(ctx context.Context, dir string) (string, error) {
	m, err := shards.ReadManifest(ctx, dir)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, sh := range m.Shards {
		fmt.Fprintf(h, "%s %d %s\n", sh.Path, sh.Rows, sh.SHA256)
	}
	fmt.Fprintf(h, "records %d dead %d\n", m.Records, m.DeadLetters.Count)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// augmentConfig builds the augmentation of the config's preset at the dataset's view size
// (or the config's image_size); overrides apply to the pretraining views only.
func (r *runner) augmentConfig(d datasets.Descriptor, preset string, overrides bool) (augment.Config, error) {
	var given []augment.Override
	if overrides {
		for _, name := range sortedKeys(r.cfg.Preprocess.AugmentOverrides) {
			given = append(given, augment.Override{Name: name, Value: r.cfg.Preprocess.AugmentOverrides[name]})
		}
	}
	c, err := pipelines.PreprocessAugment(d, preset, r.cfg.Dataset.ImageSize, given)
	if err != nil && overrides {
		return c, fmt.Errorf("preprocess.augment_overrides: %w", err)
	}
	return c, err
}

// sameDataset reports whether dir holds a complete dataset made with want (the program's
// version and the source checksums aside, which planning does not know). Another dataset
// there is an error, unless --rerun=preprocess asks to replace it.
func (r *runner) sameDataset(ctx context.Context, dir string, want shards.Config) (outcome, error) {
	m, err := shards.ReadManifest(ctx, dir)
	if errors.Is(err, shards.ErrNoManifest) {
		return outcome{}, nil
	}
	if err != nil {
		return outcome{}, err
	}
	for _, d := range m.Config.Diff(want) {
		field, _, _ := strings.Cut(d, ":")
		switch field {
		case "code_version", "source_checksum", "sources":
		default:
			diff := strings.Join(m.Config.Diff(want), "; ")
			if r.rerun[StagePreprocess] {
				return outcome{complete: true, stale: "it holds another dataset (" + diff + ")"}, nil
			}
			return outcome{}, fmt.Errorf("%s holds another dataset (%s); pass --rerun=preprocess to replace it, remove it or use another --output", dir, diff)
		}
	}
	return outcome{complete: true, version: m.Config.CodeVersion}, nil
}
