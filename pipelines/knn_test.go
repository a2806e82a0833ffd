package pipelines

import (
	"bytes"
	"context"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/analysis"
	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/shards/embeddings"
)

// clustered draws n labelled vectors around numClasses random centres.
func clustered(seed uint64, source string, n, dim, numClasses int) analysis.LabeledVectors {
	r := rand.New(rand.NewPCG(seed, 99))
	centres := make([][]float64, numClasses)
	for c := range centres {
		for range dim {
			centres[c] = append(centres[c], 2*r.NormFloat64())
		}
	}
	l := analysis.LabeledVectors{Source: source, Vectors: analysis.Vectors{Dim: dim}}
	for range n {
		c := r.IntN(numClasses)
		l.Labels = append(l.Labels, int32(c))
		for d := range dim {
			l.Vectors.Data = append(l.Vectors.Data, float32(centres[c][d]+1.5*r.NormFloat64()))
		}
	}
	return l
}

// writeEmbeddings writes l as an embedding file (a path ending in .parquet) or as a
// directory of parts files with embeddings.json; ids are 1000 + row.
func writeEmbeddings(t testing.TB, path string, l analysis.LabeledVectors, parts int, meta map[string]string) {
	t.Helper()
	ctx := context.Background()
	n := l.Vectors.Len()
	write := func(p string, from, to int) embeddings.FileInfo {
		w, err := embeddings.NewWriter(ctx, p, l.Vectors.Dim, meta)
		if err != nil {
			t.Fatal(err)
		}
		for i := from; i < to; i++ {
			if err := w.Write(int64(1000+i), l.Labels[i], l.Vectors.Row(i)); err != nil {
				t.Fatal(err)
			}
		}
		info, err := w.Close()
		if err != nil {
			t.Fatal(err)
		}
		return info
	}
	if strings.HasSuffix(path, ".parquet") || strings.HasSuffix(path, ".pq") {
		write(path, 0, n)
		return
	}
	var infos []embeddings.FileInfo
	for p := range parts {
		infos = append(infos, write(storage.Join(path, embeddings.FileName(p, parts)), p*n/parts, (p+1)*n/parts))
	}
	if _, err := embeddings.Commit(ctx, path, l.Vectors.Dim, infos, meta); err != nil {
		t.Fatal(err)
	}
}

func runKNN(t testing.TB, o KNNOptions) (*analysis.KNNResult, error) {
	t.Helper()
	ctx := context.Background()
	job, err := PlanKNN(ctx, o)
	if err != nil {
		return nil, err
	}
	return RunKNN(ctx, job)
}

func TestKNNPipelineMatchesAnalysis(t *testing.T) {
	dir := t.TempDir()
	train := clustered(1, "train", 300, 8, 5)
	test := clustered(2, "test", 70, 8, 5)
	trainDir := filepath.Join(dir, "train")
	testFile := filepath.Join(dir, "test.pq") // a single file, named as another tool might
	writeEmbeddings(t, trainDir, train, 4, map[string]string{embeddings.MetaDataset: "mystery"})
	writeEmbeddings(t, testFile, test, 1, nil)

	for _, metric := range []analysis.Metric{analysis.Cosine, analysis.Euclidean} {
		want, err := analysis.KNN(train, test, analysis.KNNConfig{K: 20, Temperature: 0.1, Metric: metric, NumClasses: 5})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range []KNNOptions{
			{QueryBlock: 1024, BankGroups: 1},
			{QueryBlock: 16, BankGroups: 3, BankBlock: 25},
			{QueryBlock: 70, BankGroups: 9, BankBlock: 1}, // more groups than files: 4
		} {
			o.Train, o.Test, o.K, o.Metric, o.PerClass = trainDir, testFile, 20, metric, true
			got, err := runKNN(t, o)
			if err != nil {
				t.Fatalf("%+v: %v", o, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%v, blocks %d, groups %d: pipeline %+v\nanalysis.KNN %+v", metric, o.QueryBlock, o.BankGroups, got, want)
			}
		}
	}
}

func TestKNNPipelineErrors(t *testing.T) {
	dir := t.TempDir()
	train := clustered(3, "train", 50, 4, 3)
	test := clustered(4, "test", 20, 4, 3)
	trainFile, testFile := filepath.Join(dir, "train.parquet"), filepath.Join(dir, "test.parquet")
	writeEmbeddings(t, trainFile, train, 1, nil)
	writeEmbeddings(t, testFile, test, 1, nil)
	bad := train
	bad.Labels = append([]int32(nil), train.Labels...)
	bad.Labels[33] = 7
	badFile := filepath.Join(dir, "bad-labels.parquet")
	writeEmbeddings(t, badFile, bad, 1, nil)
	wide := clustered(5, "wide", 20, 6, 3)
	wideFile := filepath.Join(dir, "wide.parquet")
	writeEmbeddings(t, wideFile, wide, 1, nil)
	nan := test
	nan.Vectors.Data = append([]float32(nil), test.Vectors.Data...)
	nan.Vectors.Data[4*5+1] = float32(math.NaN())
	nanFile := filepath.Join(dir, "nan.parquet")
	writeEmbeddings(t, nanFile, nan, 1, nil)

	junk := filepath.Join(dir, "junk.parquet")
	if err := os.WriteFile(junk, []byte("id,label,embedding\n1,2,3\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name string
		o    KNNOptions
		want []string
	}{
		{"not a Parquet file", KNNOptions{Train: junk, Test: testFile, K: 5}, []string{junk, "not a readable Parquet file"}},
		{"label outside the known classes", KNNOptions{Train: badFile, Test: testFile, K: 5, NumClasses: 3}, []string{badFile, "row 33", "label 7 outside [0, 3)"}},
		{"dimensions differ", KNNOptions{Train: trainFile, Test: wideFile, K: 5}, []string{trainFile, "4-dimensional", wideFile, "6-dimensional"}},
		{"non-finite query", KNNOptions{Train: trainFile, Test: nanFile, K: 5, NumClasses: 3}, []string{nanFile, "row 5", "non-finite"}},
		{"not an embedding set", KNNOptions{Train: dir, Test: testFile, K: 5}, []string{dir, "embeddings.json"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := runKNN(t, tt.o)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// A k larger than the training set lets every training vector vote, as the trainer's kNN
// monitor does with a small bank, and says so on the log; the result records the k used.
func TestKNNFitsKToTheTrainingSet(t *testing.T) {
	dir := t.TempDir()
	train, test := clustered(1, "train", 50, 4, 3), clustered(2, "test", 12, 4, 3)
	trainFile, testFile := filepath.Join(dir, "train.parquet"), filepath.Join(dir, "test.parquet")
	writeEmbeddings(t, trainFile, train, 1, nil)
	writeEmbeddings(t, testFile, test, 1, nil)
	var log bytes.Buffer
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(&log, nil)))
	got, err := runKNN(t, KNNOptions{Train: trainFile, Test: testFile, K: 51, Temperature: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	want, err := analysis.KNN(train, test, analysis.KNNConfig{K: 50, Temperature: 0.1, NumClasses: 3})
	if err != nil {
		t.Fatal(err)
	}
	if got.K != 50 || got.Top1 != want.Top1 {
		t.Errorf("k = 51 of 50 vectors: k %d, top-1 %v; want k = 50 and its top-1, %v", got.K, got.Top1, want.Top1)
	}
	if !strings.Contains(log.String(), "k = 51 is larger than the bank ("+trainFile+": 50 vectors): all 50 vote") {
		t.Errorf("the log does not say that k was lowered:\n%s", log.String())
	}
}

func TestGroupFiles(t *testing.T) {
	files := []embeddingFile{{Path: "a", Rows: 10}, {Path: "b", Rows: 0}, {Path: "c", Rows: 30}, {Path: "d", Rows: 10}, {Path: "e", Rows: 10}}
	for _, tt := range []struct {
		n    int
		want []int // files per group
	}{{1, []int{4}}, {2, []int{2, 2}}, {3, []int{2, 1, 1}}, {4, []int{1, 1, 1, 1}}, {9, []int{1, 1, 1, 1}}} {
		groups := groupFiles(files, tt.n)
		var got []int
		var rows int64
		for _, g := range groups {
			got = append(got, len(g))
			rows += sumRows(g)
		}
		if !reflect.DeepEqual(got, tt.want) || rows != 60 {
			t.Errorf("groupFiles(%d): %v files per group, %d rows; want %v, 60", tt.n, got, rows, tt.want)
		}
	}
}

func sumRows(files []embeddingFile) int64 {
	var n int64
	for _, f := range files {
		n += f.Rows
	}
	return n
}

// Embeddings of two splits whose class lists differ (a folder dataset whose splits hold
// different class folders) are refused by kNN and the linear probe, naming both and the first
// label that differs; the same lists pass, and give the class count.
func TestEvaluationsRefuseDifferentClassLists(t *testing.T) {
	dir := t.TempDir()
	train := clustered(3, "train", 30, 4, 3)
	test := clustered(4, "test", 12, 4, 3)
	abc := map[string]string{embeddings.ClassesKey: embeddings.ClassesMeta([]string{"ant", "bee", "cat"})}
	bc := map[string]string{embeddings.ClassesKey: embeddings.ClassesMeta([]string{"bee", "cat", "dog"})}
	trainFile, sameDir, otherFile := filepath.Join(dir, "train.parquet"), filepath.Join(dir, "same"), filepath.Join(dir, "other.parquet")
	writeEmbeddings(t, trainFile, train, 1, abc)
	writeEmbeddings(t, sameDir, test, 2, abc)
	writeEmbeddings(t, otherFile, test, 1, bc)
	ctx := context.Background()
	want := []string{trainFile, otherFile, "class lists differ", `label 0 is "ant" in one, "bee" in the other`}
	plans := map[string]func(test string) (int, error){
		"knn": func(test string) (int, error) {
			job, err := PlanKNN(ctx, KNNOptions{Train: trainFile, Test: test, K: 5})
			if err != nil {
				return 0, err
			}
			return job.NumClasses, nil
		},
		"linear": func(test string) (int, error) {
			job, err := PlanLinear(ctx, LinearOptions{Train: trainFile, Test: test, Config: analysis.DefaultLinearConfig()})
			if err != nil {
				return 0, err
			}
			return job.Opts.Config.NumClasses, nil
		},
	}
	for name, plan := range plans {
		if n, err := plan(sameDir); err != nil || n != 3 {
			t.Errorf("%s with the same class lists: %d classes, %v; want 3", name, n, err)
		}
		_, err := plan(otherFile)
		for _, w := range want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s with different class lists: %v; want it to mention %q", name, err, w)
			}
		}
	}
}

// Per-class accuracies name their classes where the embeddings do (a dataset's class list,
// carried from its shards), in the kNN pipeline as in the linear probe.
func TestPerClassAccuraciesNameTheClasses(t *testing.T) {
	dir := t.TempDir()
	train, test := clustered(1, "train", 60, 4, 3), clustered(2, "test", 12, 4, 3)
	meta := map[string]string{embeddings.ClassesKey: embeddings.ClassesMeta([]string{"T-shirt", "Trouser", "Pullover"})}
	trainFile, testFile := filepath.Join(dir, "train.parquet"), filepath.Join(dir, "test.parquet")
	writeEmbeddings(t, trainFile, train, 1, meta)
	writeEmbeddings(t, testFile, test, 1, meta)
	knn, err := runKNN(t, KNNOptions{Train: trainFile, Test: testFile, K: 5, Temperature: 0.1, PerClass: true})
	if err != nil {
		t.Fatal(err)
	}
	trainV, _, err := LoadEmbeddings(context.Background(), trainFile)
	if err != nil {
		t.Fatal(err)
	}
	testV, _, err := LoadEmbeddings(context.Background(), testFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg := analysis.DefaultLinearConfig()
	cfg.Epochs, cfg.Milestones = 2, nil
	linear, _, err := analysis.LinearProbe(trainV, testV, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for what, per := range map[string][]analysis.ClassAccuracy{"kNN": knn.PerClass, "linear": linear.PerClass} {
		var names []string
		for _, c := range per {
			names = append(names, c.Name)
		}
		if !slices.Equal(names, []string{"T-shirt", "Trouser", "Pullover"}) {
			t.Errorf("%s per-class accuracies name %q", what, names)
		}
	}
}
