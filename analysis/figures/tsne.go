package figures

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/dcl-beam/dcl-beam/analysis"
	"github.com/dcl-beam/dcl-beam/internal/usage"
	"github.com/dcl-beam/dcl-beam/shards/embeddings"
	"github.com/dcl-beam/dcl-beam/transforms/datasets"
)

// The t-SNE figure of embeddings (the paper's Fig. 4c) reads a sample of a few thousand rows
// and lays them out on one machine: it streams each embedding set once through a per-class
// reservoir, runs exact t-SNE (analysis.TSNE) on the sample and draws ScatterChart panels.

// TSNEOptions configure TSNE.
type TSNEOptions struct {
	// Embeddings are the sets to lay out, one panel each, side by side: a .parquet file or a
	// 'dcl embed' folder.
	Embeddings []string
	// Labels title the panels, one per set (e.g. "SimCLR (InfoNCE)", "DCL"); none: the paths.
	Labels []string
	// PerClass is how many rows of each class are sampled from each set.
	PerClass int
	// Classes limits the layout to labels 0 … Classes-1 (0: every class): the classes of
	// CIFAR-100 or ImageNet are more than colours and markers can tell apart.
	Classes int
	// Config is t-SNE's; its Seed also draws the sample.
	Config analysis.TSNEConfig
	// Output is the PNG written (local, gs:// or memfs://).
	Output string
	// Width and Height are one panel's size in pixels; Cols the panels per row (0: all in
	// one row).
	Width, Height, Cols int
}

// DefaultTSNEPerClass is the sample of each class: 1,000 points for 10 classes, a layout
// of a few seconds; DefaultTSNEClasses the classes laid out, as many as the palette's
// colours and markers keep apart at a glance.
const (
	DefaultTSNEPerClass = 100
	DefaultTSNEClasses  = 20
)

// TSNEPanel says what one panel shows.
type TSNEPanel struct {
	Label      string `json:"label"`
	Embeddings string `json:"embeddings"`
	Points     int    `json:"points"` // rows sampled and laid out
	Rows       int64  `json:"rows"`   // rows of the set
	// Unlabelled rows (label -1) cannot be coloured by class and are not sampled; nor are
	// the rows of classes beyond TSNEOptions.Classes.
	Unlabelled   int64   `json:"unlabelled,omitempty"`
	OtherClasses int64   `json:"rows_of_other_classes,omitempty"`
	KL           float64 `json:"kl"` // KL(P‖Q) of the layout
}

// TSNEResult is what TSNE wrote.
type TSNEResult struct {
	Output  string      `json:"output"`
	Classes []string    `json:"classes,omitempty"`
	Panels  []TSNEPanel `json:"panels"`
}

// TSNE samples each embedding set, lays each sample out with t-SNE and writes the panels as
// one PNG, coloured by class with a legend of the class names.
func TSNE(ctx context.Context, o TSNEOptions) (*TSNEResult, error) {
	switch {
	case len(o.Embeddings) == 0 || o.Output == "":
		return nil, usage.Errorf("embeddings and an output file are needed")
	case len(o.Labels) > 0 && len(o.Labels) != len(o.Embeddings):
		return nil, usage.Errorf("%d labels for %d embedding sets: give one label per set, or none", len(o.Labels), len(o.Embeddings))
	case o.PerClass < 1:
		return nil, usage.Errorf("%d rows per class: want at least 1", o.PerClass)
	case o.Classes < 0:
		return nil, usage.Errorf("%d classes: want at least 1, or 0 for every class", o.Classes)
	case o.Width <= 0 || o.Height <= 0:
		return nil, usage.Errorf("panel size %dx%d: both sides must be positive", o.Width, o.Height)
	}
	res := &TSNEResult{Output: o.Output}
	// Every set is sampled before any is laid out, so that sets whose classes differ are
	// refused before minutes of t-SNE.
	var sets []embeddings.ClassList
	var metas []map[string]string
	var samples []analysis.LabeledVectors
	for i, path := range o.Embeddings {
		sample, set, meta, panel, err := sampleEmbeddings(ctx, path, o.PerClass, o.Classes, o.Config.Seed)
		if err != nil {
			return nil, err
		}
		sets, metas, samples = append(sets, set), append(metas, meta), append(samples, sample)
		panel.Label = path
		if len(o.Labels) > 0 {
			panel.Label = o.Labels[i]
		}
		res.Panels = append(res.Panels, panel)
	}
	// Panels side by side must colour the same class alike.
	classes, err := embeddings.SameClasses(sets...)
	if err != nil {
		return nil, err
	}
	if classes == nil {
		classes = datasetClasses(metas)
	}
	res.Classes = classes
	var panels []Panel
	for i, sample := range samples {
		slog.Info("t-SNE", "embeddings", sample.Source, "points", len(sample.Labels), "iterations", o.Config.Iterations,
			"rows_of_other_classes", res.Panels[i].OtherClasses)
		layout, err := analysis.TSNE(ctx, sample.Vectors, o.Config, sample.Source)
		if err != nil {
			return nil, err
		}
		res.Panels[i].KL = layout.KL
		panels = append(panels, ScatterChart{Title: res.Panels[i].Label, X: layout.X, Y: layout.Y, Labels: sample.Labels, Classes: classes})
	}
	cols := o.Cols
	if cols <= 0 || cols > len(panels) {
		cols = len(panels)
	}
	rows := (len(panels) + cols - 1) / cols
	if err := SavePNG(ctx, o.Output, o.Width*cols, o.Height*rows, cols, panels...); err != nil {
		return nil, err
	}
	return res, nil
}

// sampleEmbeddings streams the set at path through a per-class sample of the labels below
// classes (0: all), and returns the class list and metadata the set carries.
func sampleEmbeddings(ctx context.Context, path string, perClass, classes int, seed uint64) (sample analysis.LabeledVectors, set embeddings.ClassList, meta map[string]string, panel TSNEPanel, err error) {
	panel = TSNEPanel{Embeddings: path}
	r, err := embeddings.Open(ctx, path, 0)
	if err != nil {
		return sample, set, nil, panel, err
	}
	defer r.Close()
	set, meta = embeddings.ClassList{Path: path, Classes: r.Classes()}, r.Meta()
	reservoir := analysis.NewClassSample(perClass, seed)
	var row int64
	for b, err := range r.Blocks() {
		if err != nil {
			return sample, set, nil, panel, err
		}
		for i, y := range b.Labels {
			switch {
			case y < 0:
				panel.Unlabelled++
			case len(set.Classes) > 0 && int(y) >= len(set.Classes):
				return sample, set, nil, panel, fmt.Errorf("%s: row %d: label %d outside the %d classes the embeddings name", path, row+int64(i), y, len(set.Classes))
			case classes > 0 && int(y) >= classes:
				panel.OtherClasses++
			default:
				if err := reservoir.Add(row+int64(i), y, b.Vector(i)); err != nil {
					return sample, set, nil, panel, fmt.Errorf("%s: %w", path, err)
				}
			}
		}
		row += int64(b.Len())
	}
	panel.Rows = row
	sample = reservoir.Result(path)
	if len(sample.Labels) == 0 {
		other := ""
		if panel.OtherClasses > 0 {
			other = fmt.Sprintf(", %d of classes from %d on, not laid out", panel.OtherClasses, classes)
		}
		return analysis.LabeledVectors{}, set, nil, panel, fmt.Errorf("%s: no labelled rows to lay out (%d rows, %d unlabelled%s)", path, row, panel.Unlabelled, other)
	}
	panel.Points = len(sample.Labels)
	return sample, set, meta, panel, nil
}

// datasetClasses is the class list of the dataset the sets' metadata name, for sets that
// carry no list of their own; nil when none names a dataset with class names (the legend
// then says "class N").
func datasetClasses(metas []map[string]string) []string {
	for _, meta := range metas {
		if name := meta[embeddings.MetaDataset]; name != "" {
			if classes, err := datasets.ClassNames(name, false); err == nil {
				return classes
			}
		}
	}
	return nil
}
