package reproduce

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/dcl-beam/dcl-beam/internal/registry"
	"github.com/dcl-beam/dcl-beam/pipelines"
	"github.com/dcl-beam/dcl-beam/trainstep"
	"github.com/dcl-beam/dcl-beam/transforms/datasets"
)

// configKeyDocs say what each key of a config's fixed structure is, by its path (list items
// and map values under their key, "[]" and "*" as in the reference): the one text the
// reference of config keys (ConfigReference) prints beside the key. The keys that the
// registries declare (a run's settings, the evaluations' settings, departures, gates) take
// their declarations' texts. TestConfigReferenceCoversEveryKey fails on a key without a text
// here, and on a text of no key.
var configKeyDocs = map[string]string{
	"name":                         "the experiment's name: letters, digits, '.', '_', '-'; its run directory's history belongs to it",
	"description":                  "one paragraph the report opens with",
	"paper":                        "the table or figure of the paper it reproduces, for the report",
	"dataset":                      "the data",
	"dataset.name":                 "a registered dataset: " + strings.Join(datasets.Names(), ", "),
	"dataset.input":                "the dataset's published files: a local folder or a gs:// prefix (for ImageNet and image folders the dataset root); `--input` replaces it",
	"dataset.inputs":               "an input of its own for a split, by split name (a folder dataset's test images elsewhere); a split absent here reads dataset.input",
	"dataset.pretrain_split":       "the split the encoder trains on (default train; STL-10: train+unlabeled, as the paper)",
	"dataset.train_split":          "the labelled split the kNN bank and the linear probe train on (default train)",
	"dataset.test_split":           "the split the evaluations classify (default test); it may share no file with the others",
	"dataset.image_size":           fmt.Sprintf("the side the views are cropped to (0: the dataset's own; at most %d)", MaxImageSize),
	"dataset.limit":                "keep only the first N images of the pretraining split (0: all), for scaled-down runs",
	"dataset.eval_limit":           "keep only the first N images of each evaluation split (0: all)",
	"preprocess":                   "how the shards are made",
	"preprocess.augment":           "the pretraining augmentation preset: " + strings.Join(knownAugment(), ", "),
	"preprocess.passes":            "augmented passes stored (views offline); epoch e reads pass e mod passes",
	"preprocess.views":             "offline (stored passes, the default) or online (each image stored once; the trainer makes every epoch's views, byte for byte those a stored pass would hold)",
	"preprocess.max_side":          "shrink larger images to this side first (0: keep them)",
	"preprocess.seed":              "the augmentation's seed",
	"preprocess.encoding":          "raw, png or jpeg (default: raw up to 96 px, jpeg above)",
	"preprocess.shards":            "shards per pass (0: chosen from the dataset's size)",
	"preprocess.augment_overrides": "augmentation parameters by their `dcl preprocess` flag names, e.g. {jitter-p: \"0.5\"}",
	"preprocess.beam_flags":        "flags passed to every Beam stage, e.g. [--runner=dataflow, --project=P]; the command line's win",
	"train":                        "the training runs: explicit runs, a sweep, or both, each starting from the defaults",
	"train.defaults":               "the settings every run starts from: the run keys below",
	"train.sweep":                  "values to sweep; the runs are the cartesian product of the lists given, named by what they sweep (dcl-b32, infonce-t0.5, dcl-q256)",
	"train.sweep.loss":             "losses: " + strings.Join(trainstep.LossNames(), ", "),
	"train.sweep.batch_size":       "batch sizes",
	"train.sweep.temperature":      "temperatures τ",
	"train.sweep.model":            "encoders: " + strings.Join(trainstep.ModelNames(), ", "),
	"train.sweep.epochs":           "epochs",
	"train.sweep.queue_size":       "MoCo's queue or NNCLR's support set sizes",
	"train.runs":                   "explicit runs, each the run keys below over the defaults",
	"train.paper":                  "the paper's figures of sweep runs, by run name: {dcl-b32: {knn_top1: 83.7, linear_top1: 85.1, source: Table 1}}",
	"train.paper.*":                "one run's figures: the keys of a run's paper",
	"train.paper.*.knn_top1":       "the paper's kNN top-1 (%)",
	"train.paper.*.linear_top1":    "the paper's linear top-1 (%)",
	"train.paper.*.source":         "the table it is from, e.g. Table 1",
	"train.pack":                   trainstep.PackSetting().Doc + "; a setting of the reproduction, not of a run (`--pack` overrides it)",
	"evaluate":                     "the evaluations of every encoder; a section left out is not run",
	"evaluate.feature":             "backbone (the default) or projection features for kNN and the linear probe",
	"evaluate.knn_every":           "the trainer's kNN monitor every N epochs, for the kNN-by-epoch plot (0: off)",
	"evaluate.knn_monitor":         "the monitor's images: a fixed sample by default",
	"evaluate.knn_monitor.full":    "embed every image of the evaluation splits instead of a sample (costly on a CPU)",
	"evaluate.knn_monitor.bank":    fmt.Sprintf("images of the train split that vote (0: %d)", trainstep.DefaultKNNBank),
	"evaluate.knn_monitor.queries": fmt.Sprintf("images of the test split classified (0: %d)", trainstep.DefaultKNNQueries),
	"evaluate.knn_monitor.seed":    fmt.Sprintf("seed of the sample (0: %d)", trainstep.DefaultKNNSeed),
	"evaluate.knn_monitor.linear":  "also fit a linear classifier to the bank's features each time and classify the queries: the linear accuracy during training (linear_top1 in train.jsonl), a fast probe of its own, not the evaluation's",
	"evaluate.baselines":           "untrained encoders evaluated beside the runs: " + RawPixels + ", " + RandomInit,
	"gates":                        "the largest drops allowed, by metric; `dcl reproduce --gate` exits 3 when one is exceeded",
	"gates.*":                      "one metric's bounds: give one or both",
	"gates.*.max_drop_vs_previous": "the largest drop against the previous reproduction in the run directory, per run, in the metric's unit (a rise for the loss)",
	"gates.*.max_drop_vs_paper":    "the largest drop below the paper's figure, per run that has one",
	"departures":                   "where the experiment departs from the paper's recipe, or chooses what it leaves unstated, and why, by setting: the report prints them beside the toolkit's own choices",
}

// runKeyDocs say what a run's keys beyond its settings are.
var runKeyDocs = map[string]string{
	"name":  "the run's name (default: made from what distinguishes it)",
	"seeds": "training seeds: the run becomes a cell of one run per seed, CELL-s1, CELL-s2, …, whose mean and spread the report gives (replaces seed)",
	"paper": "the paper's figures for the run: {knn_top1, linear_top1, source}",
}

// configKey is one key of a config's fixed structure as the reference lists it.
type configKey struct {
	path, typ string
}

// fixedKeys walks t (a config's Go type) and returns its YAML keys, depth first: a struct's
// fields by their yaml tags, a map's values under "*", a list's items under "[]" where they
// are structs. A run (RunConfig) and an evaluation's section are the registries', listed
// after.
func fixedKeys(t reflect.Type, prefix string) []configKey {
	var out []configKey
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t == reflect.TypeFor[RunConfig]() {
		return nil
	}
	for i := range t.NumField() {
		f := t.Field(i)
		tag, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if tag == "-" || !f.IsExported() || strings.Contains(opts, "inline") {
			continue
		}
		path := strings.TrimPrefix(prefix+"."+tag, ".")
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		out = append(out, configKey{path, typeName(ft)})
		switch ft.Kind() {
		case reflect.Struct:
			out = append(out, fixedKeys(ft, path)...)
		case reflect.Map:
			if el := ft.Elem(); el.Kind() == reflect.Struct {
				out = append(out, configKey{path + ".*", typeName(el)})
				out = append(out, fixedKeys(el, path+".*")...)
			}
		}
	}
	return out
}

// typeName is how the reference names a key's type.
func typeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "text"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int64, reflect.Uint64:
		return "whole number"
	case reflect.Float64:
		return "number"
	case reflect.Slice:
		if t == reflect.TypeFor[[]RunConfig]() || t.Elem().Name() == "Node" {
			return "list of runs"
		}
		return "list of " + typeName(t.Elem()) + "s"
	case reflect.Map:
		return "map of " + typeName(t.Elem())
	case reflect.Struct:
		switch t {
		case reflect.TypeFor[RunConfig]():
			return "run"
		case reflect.TypeFor[settingText]():
			return "text" // a setting's value, as its declaration parses it
		}
		return "section"
	}
	return t.String()
}

// ConfigReference is the reference of every config key as Markdown: the fixed structure's
// keys (configKeyDocs), a run's keys (trainstep.RunParams: every training setting a config
// takes, and the losses' and methods' parameters), each evaluation's keys (the registered
// evaluations of an encoder), the settings departures name (RecipeSettings) and the metrics
// gates name. docs/configs.md holds it (make docs).
func ConfigReference() string {
	var b strings.Builder
	cell := func(s string) string { return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "\n", " ") }
	b.WriteString("**The config's structure.**\n\n| key | type | what |\n|---|---|---|\n")
	for _, k := range fixedKeys(reflect.TypeFor[Config](), "") {
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", k.path, k.typ, cell(configKeyDocs[k.path]))
	}
	b.WriteString("\n**A run's keys** (in `train.defaults` and each of `train.runs`; a key left out takes its default).\n\n" +
		"| key | default | what |\n|---|---|---|\n")
	for _, k := range slices.Sorted(maps.Keys(runKeyDocs)) {
		fmt.Fprintf(&b, "| `%s` | | %s |\n", k, cell(runKeyDocs[k]))
	}
	for _, p := range runParams() {
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", p.Name, cell(defaultText(p)), cell(p.Doc))
	}
	for _, ev := range pipelines.EncoderEvaluations() {
		fmt.Fprintf(&b, "\n**`evaluate.%s`**: %s.\n\n| key | default | what |\n|---|---|---|\n", ev.Name, cell(ev.Summary))
		for _, p := range ev.Params {
			if p.Surface == registry.CommandOnly {
				continue
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s |\n", p.Name, cell(defaultText(p)), cell(p.Doc))
		}
	}
	b.WriteString("\n**`departures` keys**: the settings of the paper's recipe.\n\n| key | what it takes in |\n|---|---|\n")
	for _, s := range RecipeSettings {
		fmt.Fprintf(&b, "| `%s` | %s |\n", s.Name, cell(s.Covers))
	}
	b.WriteString("\n**`gates` metrics**.\n\n| metric | what | the paper has it |\n|---|---|---|\n")
	for _, m := range metrics() {
		has := "no"
		if m.paper != nil {
			has = "yes"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", m.Name, cell(m.Description), has)
	}
	return b.String()
}

// defaultText is a parameter's default as the reference prints it ("" where it has none).
func defaultText(p registry.Param) string {
	v := p.FormatValue(p.DefaultValue())
	if v == "" || (v == "0" && p.ZeroIsDefault && p.Value == nil && p.Default == 0) {
		return ""
	}
	return "`" + v + "`"
}
