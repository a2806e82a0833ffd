// Package reproduce runs a whole experiment from one YAML config: preprocess, one or more
// training runs, the evaluations, and a report with the paper's numbers beside ours. A stage
// whose outputs are complete is skipped, so a killed run continues where it stopped and a
// finished one is a no-op; Options.Rerun and RerunOnCodeChange redo stages on purpose, with
// what depends on them, and the run directory's stage ledger (stages.json) makes the next
// call finish a re-run that was killed. Every completed reproduction adds a file to the run
// directory's Parquet results history, which the report compares with and the config's
// gates check.
package reproduce

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/dcl-beam/dcl-beam/internal/registry"
	"github.com/dcl-beam/dcl-beam/trainstep"
	"github.com/dcl-beam/dcl-beam/transforms/augment"
	"github.com/dcl-beam/dcl-beam/transforms/datasets"
)

// Config is one experiment. Unknown keys anywhere are an error, so a misspelt option never
// silently falls back to a default.
type Config struct {
	Name        string `yaml:"name" json:"name,omitempty"`
	Description string `yaml:"description" json:"description,omitempty"`
	// Paper names the table or figure of the paper this experiment reproduces.
	Paper      string           `yaml:"paper" json:"paper,omitempty"`
	Dataset    DatasetConfig    `yaml:"dataset" json:"dataset,omitempty"`
	Preprocess PreprocessConfig `yaml:"preprocess" json:"preprocess,omitempty"`
	Train      TrainConfig      `yaml:"train" json:"train,omitempty"`
	Evaluate   EvaluateConfig   `yaml:"evaluate" json:"evaluate,omitempty"`
	// Gates are the largest drops allowed per metric (see Gate); `dcl reproduce --gate`
	// exits 3 when one is exceeded.
	Gates map[string]Gate `yaml:"gates" json:"gates,omitempty"`
	// Departures says where the experiment departs from the paper's recipe, or chooses what
	// the paper leaves unstated, and why, one line per setting (RecipeSettings names them):
	// the report prints them beside the figures, and beside them the toolkit's own choices
	// that apply to the config (ToolkitDepartures).
	Departures map[string]string `yaml:"departures" json:"departures,omitempty"`

	// Runs is Train expanded: every explicit run and every point of the sweep, with the
	// defaults filled in, in a stable order.
	Runs []RunConfig `yaml:"-"`
	// Overrides are the KEY=VALUE overrides the config was read with (ParseWith).
	Overrides []string `yaml:"-" json:"overrides,omitempty"`
}

// DatasetConfig names the dataset and where its published files are.
type DatasetConfig struct {
	Name  string `yaml:"name" json:"name,omitempty"`   // a registered dataset (datasets.Names)
	Input string `yaml:"input" json:"input,omitempty"` // local folder or gs:// prefix holding the published files
	// Inputs gives a split an input of its own (split name → path), for data that is not
	// laid out under one root: a folder dataset's test images elsewhere, say. A split
	// absent from it reads Input (which resolves each split's place under a dataset root).
	Inputs map[string]string `yaml:"inputs" json:"inputs,omitempty"`
	// PretrainSplit is what the encoder trains on (STL-10: train+unlabeled, as the paper).
	PretrainSplit string `yaml:"pretrain_split" json:"pretrain_split,omitempty"`
	// TrainSplit is the labelled split the kNN bank and the linear probe train on.
	TrainSplit string `yaml:"train_split" json:"train_split,omitempty"`
	TestSplit  string `yaml:"test_split" json:"test_split,omitempty"`
	// ImageSize overrides the side the views are cropped to (default: the dataset's own).
	ImageSize int `yaml:"image_size" json:"image_size,omitempty"`
	// Limit keeps only the first N images of the pretraining split, and EvalLimit of each
	// evaluation split (for scaled-down runs such as the demo); 0 keeps every image.
	Limit     int `yaml:"limit" json:"limit,omitempty"`
	EvalLimit int `yaml:"eval_limit" json:"eval_limit,omitempty"`
}

// MaxImageSize bounds dataset.image_size: a view of this side already takes 48 MiB as RGB
// floats, and the trainer holds a batch of them.
const MaxImageSize = 2048

// SplitInput is where split is read from: its entry in Inputs, else Input.
func (d DatasetConfig) SplitInput(split string) string {
	if in, ok := d.Inputs[split]; ok {
		return in
	}
	return d.Input
}

// PreprocessConfig is how the shards are made.
type PreprocessConfig struct {
	Augment string `yaml:"augment" json:"augment,omitempty"` // simclr-cifar, simclr-imagenet, byol
	Passes  int    `yaml:"passes" json:"passes,omitempty"`   // augmented passes E; epoch e reads pass e mod E
	// Views is where the pretraining views are made: "offline" (the default: Passes stored
	// passes) or "online" (base shards, each image once; the trainer makes every epoch's
	// views as it reads, the bytes pass e would hold). MaxSide shrinks larger images first
	// (dcl preprocess --max-side).
	Views    string `yaml:"views" json:"views,omitempty"`
	MaxSide  int    `yaml:"max_side" json:"max_side,omitempty"`
	Seed     uint64 `yaml:"seed" json:"seed,omitempty"`         // augmentation seed
	Encoding string `yaml:"encoding" json:"encoding,omitempty"` // raw, png or jpeg (default: raw up to 96 px, jpeg above)
	Shards   int    `yaml:"shards" json:"shards,omitempty"`     // shards per pass (0: chosen from the dataset size)
	// AugmentOverrides sets augmentation parameters by their flag names, e.g.
	// {"jitter-p": "0.5"}.
	AugmentOverrides map[string]string `yaml:"augment_overrides" json:"augment_overrides,omitempty"`
	// BeamFlags are passed to every Beam stage, e.g. ["--runner=dataflow", "--project=p"].
	BeamFlags []string `yaml:"beam_flags" json:"beam_flags,omitempty"`
}

// TrainConfig lists the training runs: explicit runs, a sweep (the cartesian product of the
// listed values), or both, each starting from Defaults.
type TrainConfig struct {
	Defaults RunConfig   `yaml:"defaults" json:"defaults,omitempty"`
	Sweep    SweepConfig `yaml:"sweep" json:"sweep,omitempty"`
	Runs     []yaml.Node `yaml:"runs" json:"runs,omitempty"`
	// Paper holds the paper's figures for sweep runs, by run name (e.g. "dcl-b32").
	Paper map[string]PaperFigures `yaml:"paper" json:"paper,omitempty"`
	// Pack is how many runs may train together in one compiled step (trainstep.PackSetting);
	// PackKey holds it as the YAML gives it, until Parse reads it. It changes no figure, so
	// no fingerprint holds it.
	Pack    trainstep.Pack `yaml:"-" json:"pack,omitempty"`
	PackKey *settingText   `yaml:"pack" json:"-"`
}

// SweepConfig lists the values to sweep; empty lists are not swept.
type SweepConfig struct {
	Loss        []string  `yaml:"loss" json:"loss,omitempty"`
	BatchSize   []int     `yaml:"batch_size" json:"batch_size,omitempty"`
	Temperature []float64 `yaml:"temperature" json:"temperature,omitempty"`
	Model       []string  `yaml:"model" json:"model,omitempty"`
	Epochs      []int     `yaml:"epochs" json:"epochs,omitempty"`
	// QueueSize sweeps MoCo's queue (or NNCLR's support set), e.g. the paper's Table 5.
	QueueSize []int `yaml:"queue_size" json:"queue_size,omitempty"`
}

// RunConfig is one pretraining run: its name, the training settings it gives, and its seeds
// and the paper's figures.
type RunConfig struct {
	Name string `yaml:"name"`
	// Settings are the training settings the run gives, by name (trainstep.RunParams: the
	// settings of trainstep.TrainSettings a configuration takes, and the parameters the
	// losses and methods declare), each as its declaration reads it: the keys of a run beyond
	// its name, seeds and paper figures. One left out takes its declared default where the
	// run is trained (trainstep.ApplySettings); a zero given for a setting whose zero is the
	// default (registry.Param.ZeroIsDefault) is left out.
	Settings map[string]any `yaml:"-"`
	// SettingKeys holds those keys as the YAML gives them, until Parse reads them.
	SettingKeys map[string]settingText `yaml:",inline"`
	// Seeds makes the run a cell of several runs, one per training seed (the initial weights
	// and the order of the batches; the augmented views are the same shards), named
	// CELL-s1, CELL-s2, …; the report gives each cell's mean and spread. It replaces seed.
	Seeds []uint64 `yaml:"seeds"`
	// Cell is the cell a run belongs to: its name without the seed's suffix (expand sets it).
	Cell string `yaml:"-"`
	// Paper holds the paper's figures for this run, shown beside ours in the report.
	Paper PaperFigures `yaml:"paper"`
}

// PaperFigures are published accuracies (percent) for one run; zero means "not reported".
type PaperFigures struct {
	KNNTop1    float64 `yaml:"knn_top1" json:"knn_top1,omitempty"`
	LinearTop1 float64 `yaml:"linear_top1" json:"linear_top1,omitempty"`
	// Source names the table, e.g. "Table 1".
	Source string `yaml:"source" json:"source,omitempty"`
}

// KNNMonitorConfig is evaluate.knn_monitor: the trainer's kNN monitor embeds bank and queries
// images (a sample drawn once with seed; 0: trainstep's DefaultKNN*), or with full every image
// of the evaluation splits.
type KNNMonitorConfig struct {
	Full    bool   `yaml:"full" json:"full,omitempty"`
	Bank    int    `yaml:"bank" json:"bank,omitempty"`
	Queries int    `yaml:"queries" json:"queries,omitempty"`
	Seed    uint64 `yaml:"seed" json:"seed,omitempty"`
	Linear  bool   `yaml:"linear" json:"linear,omitempty"`
}

// EvaluateConfig lists the evaluations; a missing section is skipped.
type EvaluateConfig struct {
	Feature string `yaml:"feature" json:"feature,omitempty"` // backbone (default) or projection
	// Evaluations are the evaluations of each encoder the config asks for (evaluate.NAME: an
	// evaluation registered in package pipelines that evaluates an encoder, such as knn,
	// linear or npc), by name, with the settings their sections give (the keys its
	// parameters declare). The reproduction runs them in registration order.
	Evaluations map[string]registry.Settings `yaml:"-" json:"-"`
	// Sections holds those sections as the YAML gives them, until Parse reads them.
	Sections map[string]evaluationSection `yaml:",inline" json:"-"`
	// KNNEvery runs the trainer's kNN monitor every N epochs (0: off).
	KNNEvery int `yaml:"knn_every" json:"knn_every,omitempty"`
	// KNNMonitor chooses the monitor's images: a fixed sample by default
	// (trainstep.KNNMonitorOptions).
	KNNMonitor *KNNMonitorConfig `yaml:"knn_monitor" json:"knn_monitor,omitempty"`
	// Baselines evaluates untrained encoders beside the runs: raw-pixels, random-init.
	Baselines []string `yaml:"baselines" json:"baselines,omitempty"`
}

// Gate is the largest drop of one metric allowed for every run, in the metric's unit
// (percentage points for accuracies; a rise for the loss): against the previous reproduction
// in the same run directory, and against the paper's figure where the run has one. A nil
// bound is not checked; 0 allows no drop at all.
type Gate struct {
	MaxDropVsPrevious *float64 `yaml:"max_drop_vs_previous" json:"max_drop_vs_previous,omitempty"`
	MaxDropVsPaper    *float64 `yaml:"max_drop_vs_paper" json:"max_drop_vs_paper,omitempty"`
}

var validName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._-]*$`)

// knownAugment are the presets pretraining can use: every preset but the evaluation's.
func knownAugment() []string {
	return slices.DeleteFunc(augment.Presets(), func(p string) bool { return p == augment.None })
}

// Parse reads a config, rejects unknown keys, expands the runs and validates everything.
// name is used in error messages (the file name).
func Parse(r io.Reader, name string) (*Config, error) {
	return ParseWith(r, name, nil)
}

// ParseWith is Parse of the config with overrides applied to its keys first (`dcl reproduce
// --set`): a key or value an override gives is checked as the file's are, and the config
// records the overrides (Config.Overrides) for the report.
func ParseWith(r io.Reader, name string, overrides []Override) (*Config, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	if len(overrides) > 0 {
		if data, err = applyOverrides(data, overrides); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		var sets []string
		for _, o := range overrides {
			sets = append(sets, "--set "+o.String())
		}
		// Lines are those of the config as the overrides leave it, not the file's.
		name += " with " + strings.Join(sets, " ")
	}
	c, err := parse(data, name)
	if err != nil {
		return nil, err
	}
	for _, o := range overrides {
		c.Overrides = append(c.Overrides, o.String())
	}
	return c, nil
}

func parse(data []byte, name string) (*Config, error) {
	var c Config
	if err := decodeStrict(data, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if err := c.Evaluate.readSections(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if err := c.Train.Defaults.readSettings("train.defaults"); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if err := c.Train.readPack(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if err := c.expand(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return &c, nil
}

// decodeStrict decodes one YAML document into v, refusing what YAML would let through
// silently: unknown keys, a second document (which the decoder would ignore), a fraction in
// a whole-number field (which it would truncate: passes: 2.5 → 2) and a number that is not
// finite (.inf, .nan: no setting means them).
func decodeStrict(data []byte, v any) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return errors.New("the config is empty")
		}
		return err
	}
	var next yaml.Node
	if err := dec.Decode(&next); err == nil {
		return fmt.Errorf("line %d: a second YAML document: a config is one document (remove the '---' line)", next.Line)
	} else if !errors.Is(err, io.EOF) {
		return err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return err
	}
	return checkScalars(&doc, reflect.TypeOf(v), "")
}

// checkScalars walks a YAML node with the Go type it decodes into and refuses a number that
// the decoder would change: a fraction given for a whole number, and an infinite or NaN
// float. path names the key, for the message.
func checkScalars(n *yaml.Node, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if err := checkScalars(c, t, path); err != nil {
				return err
			}
		}
	case yaml.AliasNode:
		return checkScalars(n.Alias, t, path)
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, val := n.Content[i], n.Content[i+1]
			sub := strings.TrimPrefix(path+"."+key.Value, ".")
			switch t.Kind() {
			case reflect.Struct:
				if f, ok := yamlField(t, key.Value); ok {
					if err := checkScalars(val, f.Type, sub); err != nil {
						return err
					}
				}
			case reflect.Map:
				if err := checkScalars(val, t.Elem(), sub); err != nil {
					return err
				}
			}
		}
	case yaml.SequenceNode:
		if t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
			for i, c := range n.Content {
				if err := checkScalars(c, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
					return err
				}
			}
		}
	case yaml.ScalarNode:
		if n.Tag != "!!float" && n.Tag != "!!int" {
			return nil
		}
		f, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64)
		if err != nil {
			f, err = yamlFloat(n)
			if err != nil {
				return nil // the decoder reports it
			}
		}
		switch t.Kind() {
		case reflect.Float32, reflect.Float64:
			if math.IsNaN(f) || math.IsInf(f, 0) {
				return fmt.Errorf("line %d: %s: %s is not a finite number", n.Line, path, n.Value)
			}
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			if n.Tag == "!!float" && (f != math.Trunc(f) || math.IsInf(f, 0) || math.IsNaN(f)) {
				return fmt.Errorf("line %d: %s: %s is not a whole number", n.Line, path, n.Value)
			}
		}
	}
	return nil
}

// yamlFloat decodes a float scalar as YAML reads it (.inf, .nan, 1e3).
func yamlFloat(n *yaml.Node) (float64, error) {
	var f float64
	err := n.Decode(&f)
	return f, err
}

// yamlField finds the field of struct t that the YAML key name decodes into.
func yamlField(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if tag == "-" || !f.IsExported() {
			continue
		}
		if tag == "" {
			tag = strings.ToLower(f.Name)
		}
		if tag == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// expand turns the explicit runs and the sweep into Runs, each starting from the defaults.
func (c *Config) expand() error {
	for i := range c.Train.Runs {
		node := &c.Train.Runs[i]
		// Decode the run over a copy of the defaults, strictly: re-encoding the node lets
		// the strict decoder check its keys.
		raw, err := yaml.Marshal(node)
		if err != nil {
			return fmt.Errorf("train.runs[%d]: %w", i, err)
		}
		run := c.Train.Defaults
		if err := decodeStrict(raw, &run); err != nil {
			return fmt.Errorf("train.runs[%d] (line %d): %w", i, node.Line, err)
		}
		if err := run.readSettings(fmt.Sprintf("train.runs[%d]", i)); err != nil {
			return err
		}
		if run.Name == "" {
			run.Name = runName(run, true, true, false, false, false, false)
		}
		c.Runs = append(c.Runs, run)
	}
	sw := c.Train.Sweep
	if len(sw.Loss)+len(sw.BatchSize)+len(sw.Temperature)+len(sw.Model)+len(sw.Epochs)+len(sw.QueueSize) > 0 {
		points := []RunConfig{c.Train.Defaults}
		for _, axis := range []struct {
			setting string
			values  []string
		}{
			{trainstep.SettingModel, sw.Model}, {trainstep.SettingLoss, sw.Loss}, {trainstep.SettingBatchSize, texts(sw.BatchSize)},
			{trainstep.SettingTemperature, texts(sw.Temperature)}, {trainstep.SettingEpochs, texts(sw.Epochs)},
			{trainstep.SettingQueueSize, texts(sw.QueueSize)},
		} {
			var err error
			if points, err = sweepOver(points, axis.setting, axis.values); err != nil {
				return fmt.Errorf("train.sweep.%w", err)
			}
		}
		for _, run := range points {
			run.Name = runName(run, true, len(sw.BatchSize) > 0, len(sw.Temperature) > 0, len(sw.Model) > 0, len(sw.Epochs) > 0, len(sw.QueueSize) > 0)
			if fig, ok := c.Train.Paper[run.Name]; ok {
				run.Paper = fig
			}
			c.Runs = append(c.Runs, run)
		}
	}
	return c.expandSeeds()
}

// expandSeeds makes every run that lists seeds a cell of one run per seed, and names every
// run's cell. The runs go seed by seed: every cell's first seed, then every cell's second, so
// that a reproduction stopped part-way has figures for every cell before it has spreads.
func (c *Config) expandSeeds() error {
	var bySeed [][]RunConfig // bySeed[i]: the runs of each cell's (i+1)-th seed
	for _, r := range c.Runs {
		r.Cell = r.Name
		seeds := r.Seeds
		given, _ := r.given(trainstep.SettingSeed).(uint64)
		switch {
		case len(r.Seeds) == 0:
			seeds = []uint64{given}
		case given != 0:
			return fmt.Errorf("run %q: seed %d and seeds %v: give one (a seed in train.defaults applies to every run; seeds replaces it)", r.Name, given, r.Seeds)
		}
		seen := map[uint64]bool{}
		for i, s := range seeds {
			if len(r.Seeds) > 0 && (s == 0 || seen[s]) {
				return fmt.Errorf("run %q: seeds %v: want distinct seeds of 1 or more", r.Name, r.Seeds)
			}
			seen[s] = true
			run, err := r.with(trainstep.SettingSeed, strconv.FormatUint(s, 10))
			if err != nil {
				return err
			}
			run.Seeds = nil
			if len(seeds) > 1 {
				run.Name = r.Name + "-s" + strconv.FormatUint(s, 10)
			}
			if i == len(bySeed) {
				bySeed = append(bySeed, nil)
			}
			bySeed[i] = append(bySeed[i], run)
		}
	}
	c.Runs = slices.Concat(bySeed...)
	return nil
}

// sweepOver returns every point with setting given each of values in turn.
func sweepOver(points []RunConfig, setting string, values []string) ([]RunConfig, error) {
	if len(values) == 0 {
		return points, nil
	}
	out := make([]RunConfig, 0, len(points)*len(values))
	for _, p := range points {
		for _, v := range values {
			q, err := p.with(setting, v)
			if err != nil {
				return nil, err
			}
			out = append(out, q)
		}
	}
	return out, nil
}

// texts are values as a YAML scalar writes them.
func texts[T any](values []T) []string {
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = fmt.Sprint(v)
	}
	return out
}

// runName names a run by the values that distinguish it, e.g. "dcl-b32", "infonce-t0.5" or
// "dcl-q256".
func runName(r RunConfig, loss, batch, temp, model, epochs, queue bool) string {
	var parts []string
	if model {
		parts = append(parts, r.Model())
	}
	if loss {
		parts = append(parts, r.Loss())
	}
	if batch {
		parts = append(parts, "b"+strconv.Itoa(r.BatchSize()))
	}
	if temp {
		parts = append(parts, "t"+strconv.FormatFloat(r.Temperature(), 'g', -1, 64))
	}
	if epochs {
		parts = append(parts, "e"+strconv.Itoa(r.Epochs()))
	}
	if queue {
		parts = append(parts, "q"+strconv.Itoa(r.QueueSize()))
	}
	return strings.Join(parts, "-")
}

func (c *Config) runNames() []string {
	names := make([]string, len(c.Runs))
	for i, r := range c.Runs {
		names[i] = r.Name
	}
	return names
}

// cellNames are the names of the config's cells, in order.
func (c *Config) cellNames() []string {
	var names []string
	for _, r := range c.Runs {
		if !slices.Contains(names, r.Cell) {
			names = append(names, r.Cell)
		}
	}
	return names
}

func (c *Config) validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(validName.MatchString(c.Name), "name %q: want letters, digits, '.', '_' or '-'", c.Name)
	if _, err := datasets.Lookup(c.Dataset.Name); err != nil {
		errs = append(errs, fmt.Errorf("dataset.name %q: want one of %s", c.Dataset.Name, strings.Join(datasets.Names(), ", ")))
	}
	splits := []string{cmp.Or(c.Dataset.PretrainSplit, "train"), cmp.Or(c.Dataset.TrainSplit, "train"), cmp.Or(c.Dataset.TestSplit, "test")}
	for _, split := range splits {
		check(c.Dataset.SplitInput(split) != "", "dataset.input is required (the %s split has no dataset.inputs entry)", split)
	}
	for _, split := range slices.Sorted(maps.Keys(c.Dataset.Inputs)) {
		check(slices.Contains(splits, split), "dataset.inputs.%s: the config reads no split %q (it reads %s)", split, split, strings.Join(slices.Compact(slices.Sorted(slices.Values(splits))), ", "))
		check(c.Dataset.Inputs[split] != "", "dataset.inputs.%s: empty path", split)
	}
	check(c.Dataset.Limit >= 0, "dataset.limit %d: must not be negative", c.Dataset.Limit)
	check(c.Dataset.EvalLimit >= 0, "dataset.eval_limit %d: must not be negative", c.Dataset.EvalLimit)
	check(c.Dataset.ImageSize >= 0 && c.Dataset.ImageSize <= MaxImageSize, "dataset.image_size %d: want 0 (the dataset's) to %d", c.Dataset.ImageSize, MaxImageSize)
	check(c.Preprocess.Shards >= 0, "preprocess.shards %d: must not be negative (0 chooses from the dataset's size)", c.Preprocess.Shards)
	check(c.Evaluate.KNNEvery >= 0, "evaluate.knn_every %d: must not be negative (0: off)", c.Evaluate.KNNEvery)
	for _, b := range c.Evaluate.Baselines {
		check(b == RawPixels || b == RandomInit, "evaluate.baselines: %q: want %s or %s", b, RawPixels, RandomInit)
	}
	check(slices.Contains(knownAugment(), c.Preprocess.Augment), "preprocess.augment %q: want one of %s", c.Preprocess.Augment, strings.Join(knownAugment(), ", "))
	for _, k := range sortedKeys(c.Departures) {
		check(slices.Contains(recipeSettingNames(), k), "departures.%s: not a setting of the recipe (want one of %s)", k, strings.Join(recipeSettingNames(), ", "))
		check(strings.TrimSpace(c.Departures[k]) != "", "departures.%s: say where and why the experiment departs", k)
	}
	switch c.Preprocess.Views {
	case "", "offline":
		check(c.Preprocess.Passes > 0, "preprocess.passes %d: must be at least 1", c.Preprocess.Passes)
	case "online":
		check(c.Preprocess.Passes == 0, "preprocess.views online stores no passes (the trainer makes a fresh one every epoch): drop preprocess.passes")
	default:
		check(false, "preprocess.views %q: want offline or online", c.Preprocess.Views)
	}
	check(c.Preprocess.MaxSide >= 0, "preprocess.max_side %d: must not be negative", c.Preprocess.MaxSide)
	check(slices.Contains([]string{"", "raw", "png", "jpeg"}, c.Preprocess.Encoding), "preprocess.encoding %q: want raw, png or jpeg", c.Preprocess.Encoding)
	check(len(c.Runs) > 0, "train: no runs (give train.runs or train.sweep)")
	seen, cells := map[string]bool{}, map[string]bool{}
	for _, r := range c.Runs {
		cells[r.Cell] = true
		where := fmt.Sprintf("run %q", r.Name)
		check(validName.MatchString(r.Name), "%s: the name must be letters, digits, '.', '_' or '-'", where)
		check(!seen[r.Name], "%s: two runs have this name", where)
		seen[r.Name] = true
		check(slices.Contains(trainstep.LossNames(), r.Loss()), "%s: loss %q: want one of %s", where, r.Loss(), strings.Join(trainstep.LossNames(), ", "))
		if slices.Contains(trainstep.LossNames(), r.Loss()) {
			t, err := r.Training()
			if err == nil {
				err = t.Step.Validate()
			}
			if err == nil {
				// The run's own checks, the output folder aside (the stage picks it).
				t.Run.Out = "-"
				err = t.Run.Validate()
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", where, err))
			}
		}
		check(r.Model() != "", "%s: model is required", where)
		check(r.BatchSize() >= 2, "%s: batch_size %d: contrastive learning needs at least 2 images per batch", where, r.BatchSize())
		check(r.Epochs() >= 1, "%s: epochs %d: must be at least 1", where, r.Epochs())
		check(r.Temperature() > 0, "%s: temperature %g: must be positive", where, r.Temperature())
		lr, warmup := r.givenNumber(trainstep.SettingLR), r.givenNumber(trainstep.SettingWarmupEpochs)
		check(lr >= 0, "%s: lr %g: must not be negative", where, lr)
		for _, key := range []string{trainstep.SettingWidth, trainstep.SettingWarmupEpochs, trainstep.SettingCheckpointEvery} {
			v := r.givenNumber(key)
			check(v >= 0, "%s: %s %g: must not be negative (0: the default)", where, key, v)
		}
		check(warmup < float64(r.Epochs()) || warmup == 0, "%s: warmup_epochs %g: must be fewer than the %d epochs", where, warmup, r.Epochs())
	}
	if m := c.Evaluate.KNNMonitor; m != nil {
		check(m.Bank >= 0 && m.Queries >= 0, "evaluate.knn_monitor: bank %d and queries %d must not be negative", m.Bank, m.Queries)
	}
	for _, name := range slices.Sorted(maps.Keys(c.Train.Paper)) {
		check(cells[name], "train.paper names run %q, which the sweep does not produce (runs: %s)", name, strings.Join(c.cellNames(), ", "))
	}
	check(slices.Contains([]string{"", "backbone", "projection"}, c.Evaluate.Feature), "evaluate.feature %q: want backbone or projection", c.Evaluate.Feature)
	for _, name := range slices.Sorted(maps.Keys(c.Gates)) {
		g := c.Gates[name]
		m, ok := lookupMetric(name)
		if !ok {
			errs = append(errs, fmt.Errorf("gates: unknown metric %q: want one of %s", name, strings.Join(MetricNames(), ", ")))
			continue
		}
		check(g.MaxDropVsPrevious != nil || g.MaxDropVsPaper != nil, "gates.%s: give max_drop_vs_previous, max_drop_vs_paper or both", name)
		for _, b := range []struct {
			key string
			v   *float64
		}{{"max_drop_vs_previous", g.MaxDropVsPrevious}, {"max_drop_vs_paper", g.MaxDropVsPaper}} {
			check(b.v == nil || (*b.v >= 0 && !math.IsInf(*b.v, 0)), "gates.%s.%s %v: must be a drop of 0 or more", name, b.key, deref(b.v, 0))
		}
		check(g.MaxDropVsPaper == nil || m.paper != nil, "gates.%s.max_drop_vs_paper: the paper has no %s figures (only %s)", name, name, metricsWithPaper())
		check(m.measured(c.Evaluate), "gates.%s: the config has no evaluate.%s section to measure it", name, m.evaluation)
	}
	return errors.Join(errs...)
}

// Fingerprint identifies what the config computes: the same fingerprint means the same
// data, runs and evaluations. What cannot change a figure is left out: where the input lies,
// the Beam runner, the name and description, the paper's figures and the gates.
func (c *Config) Fingerprint() string {
	d, p := c.Dataset, c.Preprocess
	d.Input, d.Inputs, p.BeamFlags = "", nil, nil
	runs := slices.Clone(c.Runs)
	for i := range runs {
		runs[i].Paper = PaperFigures{}
	}
	data, err := json.Marshal(struct {
		Dataset    DatasetConfig
		Preprocess PreprocessConfig
		Runs       []RunConfig
		Evaluate   EvaluateConfig
	}{d, p, runs, c.Evaluate})
	if err != nil {
		// Only a number JSON cannot hold (NaN, ±Inf), which Parse refuses; a config made
		// otherwise is still told apart by its printed form.
		data = fmt.Appendf(nil, "%#v %#v %#v %#v", d, p, runs, c.Evaluate)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:6])
}

// PaperTable returns the runs that have a published figure, sorted by name, for reports.
func (c *Config) PaperTable() []RunConfig {
	var out []RunConfig
	for _, r := range c.Runs {
		if r.Paper.KNNTop1 != 0 || r.Paper.LinearTop1 != 0 {
			out = append(out, r)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
