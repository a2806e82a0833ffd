package pipelines

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/options/jobopts"

	"github.com/dcl-beam/dcl-beam/analysis"
	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/shards/embeddings"
	"github.com/dcl-beam/dcl-beam/transforms/datasets"
)

// What the evaluation pipelines (embed, knn, linear, npc) share: reading embedding sets,
// the class count, and a compact binary encoding of the blocks that travel between steps.

// EvalMetricsNamespace is the namespace of the evaluation pipelines' counters.
const EvalMetricsNamespace = "dcl.eval"

// embeddingFile is one file of an embedding set, with the training-set index of its first
// row: files are numbered in the set's order (the manifest's, for a directory).
type embeddingFile struct {
	Path   string
	Offset int64
	Rows   int64
}

// embeddingSet describes an embedding file or directory without reading its vectors.
type embeddingSet struct {
	Path  string
	Files []embeddingFile
	Rows  int64
	Dim   int
	Meta  map[string]string // the directory manifest's meta, or a single file's footer's; nil when a file has none
	// Classes is the class list the embeddings carry (embeddings.Reader.Classes).
	Classes []string
}

// inspectEmbeddings opens path (a Parquet file or a directory with embeddings.json),
// checking every file's schema and dimension, and returns the files with their row offsets.
func inspectEmbeddings(ctx context.Context, path string) (*embeddingSet, error) {
	r, err := embeddings.Open(ctx, path, 1)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	set := &embeddingSet{Path: path, Dim: r.Dim(), Rows: r.Rows(), Meta: r.Meta(), Classes: r.Classes()}
	var offset int64
	for _, f := range r.Files() {
		set.Files = append(set.Files, embeddingFile{Path: f.Path, Offset: offset, Rows: f.Rows})
		offset += f.Rows
	}
	return set, nil
}

// LoadEmbeddings reads a whole embedding set into memory as labelled vectors (Source is the
// path), with the rows' ids. Vectors of mixed length, or non-finite values, are an error
// naming the file.
func LoadEmbeddings(ctx context.Context, path string) (analysis.LabeledVectors, []int64, error) {
	r, err := embeddings.Open(ctx, path, 0)
	if err != nil {
		return analysis.LabeledVectors{}, nil, err
	}
	defer r.Close()
	out := analysis.LabeledVectors{Source: path, Vectors: analysis.Vectors{Dim: r.Dim()}, Classes: r.Classes()}
	out.Vectors.Data = make([]float32, 0, r.Rows()*int64(r.Dim()))
	out.Labels = make([]int32, 0, r.Rows())
	ids := make([]int64, 0, r.Rows())
	for b, err := range r.Blocks() {
		if err != nil {
			return analysis.LabeledVectors{}, nil, err
		}
		if b.Dim != out.Vectors.Dim {
			return analysis.LabeledVectors{}, nil, fmt.Errorf("%s: vectors of %d and %d values", path, out.Vectors.Dim, b.Dim)
		}
		out.Vectors.Data = append(out.Vectors.Data, b.Vectors...)
		out.Labels = append(out.Labels, b.Labels...)
		ids = append(ids, b.IDs...)
	}
	if err := out.Vectors.Validate(path); err != nil {
		return analysis.LabeledVectors{}, nil, err
	}
	return out, ids, nil
}

// resolveNumClasses returns the class count to evaluate with, after refusing sets whose
// class lists differ (the same label naming two classes): given > 0 wins; then the class
// list the sets carry; then that of the dataset named in either set's metadata; then one
// more than the largest label in the sets, which reads their labels.
func resolveNumClasses(ctx context.Context, given int, sets ...*embeddingSet) (int, error) {
	classes, err := sameClasses(sets...)
	if err != nil {
		return 0, err
	}
	if given > 0 {
		return given, nil
	}
	if len(classes) > 0 {
		return len(classes), nil
	}
	for _, s := range sets {
		if name := s.Meta[embeddings.MetaDataset]; name != "" {
			if classes, err := datasets.ClassNames(name, false); err == nil {
				return len(classes), nil
			}
		}
	}
	n := 0
	for _, s := range sets {
		top, err := labelCount(ctx, s.Path)
		if err != nil {
			return 0, err
		}
		n = max(n, top)
	}
	if n == 0 {
		return 0, errors.New("the embeddings have no rows")
	}
	slog.Info("class count not given and no known dataset in the embeddings' metadata: using the largest label + 1", "classes", n)
	return n, nil
}

// labelCount is the largest label of the set at path, plus one; a negative label is an error.
func labelCount(ctx context.Context, path string) (int, error) {
	r, err := embeddings.Open(ctx, path, 0)
	if err != nil {
		return 0, err
	}
	defer r.Close()
	n := 0
	var row int64
	for b, err := range r.Blocks() {
		if err != nil {
			return 0, err
		}
		for i, y := range b.Labels {
			if y < 0 {
				return 0, fmt.Errorf("%s: row %d: negative label %d (unlabelled examples cannot be evaluated)", path, row+int64(i), y)
			}
			n = max(n, int(y)+1)
		}
		row += int64(b.Len())
	}
	return n, nil
}

// sameClasses is embeddings.SameClasses of the sets.
func sameClasses(sets ...*embeddingSet) ([]string, error) {
	lists := make([]embeddings.ClassList, len(sets))
	for i, s := range sets {
		lists[i] = embeddings.ClassList{Path: s.Path, Classes: s.Classes}
	}
	return embeddings.SameClasses(lists...)
}

// checkLabels reports the first label outside [0, numClasses) of a block read from file,
// whose first row is row first of the file.
func checkLabels(file string, first int64, labels []int32, numClasses int) error {
	for i, y := range labels {
		if y < 0 || int(y) >= numClasses {
			return fmt.Errorf("%s: row %d: label %d outside [0, %d) for a dataset of %d classes", file, first+int64(i), y, numClasses, numClasses)
		}
	}
	return nil
}

// submitOnly reports a run that does not wait for the job: --dry_run translates it,
// --async submits it and returns.
func submitOnly() bool { return dryRun() || *jobopts.Async }

// discardLogger keeps the compute backend's one-line notice out of workers' logs and plans.
func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// runForResult runs the pipeline build makes, whose last step writes one JSON result to
// *output, on the runner the Beam flags select, and reads the result back into res. Without
// an output it writes to a temporary local file, which only a runner in this process or on
// this machine can reach. It reports false, with no error, when the job was only translated
// (--dry_run) or submitted (--async): there is nothing to read yet.
func runForResult(ctx context.Context, name string, output *string, build func(beam.Scope), res any) (bool, error) {
	if *output == "" {
		if *jobopts.Async {
			return false, errors.New("--async needs --output: a submitted job's result cannot come back here")
		}
		dir, err := os.MkdirTemp("", "dcl-"+name+"-")
		if err != nil {
			return false, err
		}
		defer os.RemoveAll(dir)
		*output = filepath.Join(dir, name+".json")
	}
	start := time.Now()
	p, s := beam.NewPipelineWithRoot()
	build(s)
	if _, err := runPipeline(ctx, name, p); err != nil {
		return false, err
	}
	slog.Debug(name+" pipeline finished", "wall", time.Since(start))
	if submitOnly() {
		return false, nil
	}
	if err := storage.LoadJSON(ctx, *output, res); err != nil {
		return false, fmt.Errorf("the pipeline finished but wrote no result (a remote runner needs --output on storage both can reach): %w", err)
	}
	return true, nil
}
