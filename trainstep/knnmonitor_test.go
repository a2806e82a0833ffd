package trainstep

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/gpu"
	"github.com/dcl-beam/dcl-beam/shards"
	"github.com/dcl-beam/dcl-beam/transforms"
	"github.com/dcl-beam/dcl-beam/transforms/datasets"
)

// knnClassImages makes n labelled h×w grayscale images of 3 classes: a class prototype plus noise.
func knnClassImages(seed uint64, n, h, w int) ([]transforms.Image, []int32) {
	r := rand.New(rand.NewPCG(seed, 1))
	protos := make([][]float64, 3)
	pr := rand.New(rand.NewPCG(42, 42)) // the same classes in every set
	for k := range protos {
		protos[k] = make([]float64, h*w)
		for i := range protos[k] {
			protos[k][i] = pr.Float64() * 255
		}
	}
	imgs := make([]transforms.Image, n)
	labels := make([]int32, n)
	for i := range imgs {
		labels[i] = int32(i % 3)
		imgs[i] = transforms.NewImage(h, w, 1)
		for j := range imgs[i].Pix {
			imgs[i].Pix[j] = uint8(min(255, max(0, protos[i%3][j]+r.NormFloat64()*30)))
		}
	}
	return imgs, labels
}

func writeKNNShards(t *testing.T, dir string, imgs []transforms.Image, labels []int32) {
	t.Helper()
	ctx := context.Background()
	cfg := shards.Config{Dataset: "synthetic", Split: "test", Preset: "none", Augment: json.RawMessage(`{}`), Seed: 1,
		Passes: 1, Parts: 1, Views: 1, Encoding: shards.Raw, Height: imgs[0].H, Width: imgs[0].W, Channels: 1,
		CodeVersion: "test", SourceChecksum: "sha256:00"}
	if err := shards.Prepare(ctx, dir, cfg, false); err != nil {
		t.Fatal(err)
	}
	w, err := shards.NewWriter(ctx, dir, shards.ShardID{Pass: 0, Part: 0, Parts: 1}, cfg, shards.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, img := range imgs {
		if err := w.WriteViews(fmt.Sprintf("k%04d", i), int64(i), labels[i], img, transforms.Image{}); err != nil {
			t.Fatal(err)
		}
	}
	info, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := shards.Commit(ctx, dir, cfg, []shards.ShardInfo{info}, int64(len(imgs)), shards.DeadLetters{}); err != nil {
		t.Fatal(err)
	}
}

func TestKNNMonitorDuringTraining(t *testing.T) {
	bankDir, queryDir := t.TempDir(), t.TempDir()
	bankImgs, bankLabels := knnClassImages(1, 60, 6, 6)
	writeKNNShards(t, bankDir, bankImgs, bankLabels)
	qImgs, qLabels := knnClassImages(2, 30, 6, 6)
	writeKNNShards(t, queryDir, qImgs, qLabels)

	mon, err := NewKNNMonitor(context.Background(), bankDir, queryDir, KNNMonitorOptions{Linear: true})
	if err != nil {
		t.Fatal(err)
	}
	// Training pairs: two noisy views of the bank images.
	var pairs []Pair
	for i, img := range bankImgs {
		v2 := transforms.NewImage(6, 6, 1)
		for j := range v2.Pix {
			v2.Pix[j] = img.Pix[(j+1)%len(img.Pix)]
		}
		pairs = append(pairs, Pair{View1: img, View2: v2, Label: bankLabels[i]})
	}
	src, err := NewMemorySource(datasets.IDX, pairs)
	if err != nil {
		t.Fatal(err)
	}
	backend, err := gpu.New(context.Background(), gpu.Options{Kind: gpu.CPU})
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Finalize()
	cfg := StepConfig{
		Model:     ModelConfig{Name: MLP, BaseWidth: 8, Channels: 1},
		Loss:      LossConfig{Kind: DCL, Temperature: 0.2},
		Optimizer: OptimizerConfig{Kind: SGDMomentum, Momentum: 0.9},
	}
	run := RunConfig{Data: "memory", Out: t.TempDir(), BatchSize: 10, Epochs: 2, BaseLR: 0.1, MonitorEvery: 1}
	sum, err := Train(context.Background(), cfg, run, TrainOptions{
		Backend: backend, Source: src, Monitor: mon.Run, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	top1, ok := sum.Monitor["knn_top1"].(float64)
	if !ok || top1 < 90 || top1 > 100 || sum.Monitor["knn_k"] != 60 {
		t.Errorf("monitor result %v: want top-1 ≥ 90%% on 3 well separated classes and k = 60 (the bank)", sum.Monitor)
	}
	if lin, ok := sum.Monitor["linear_top1"].(float64); !ok || lin < 90 || lin > 100 || sum.Monitor["linear_top5"] != 100.0 {
		t.Errorf("monitor result %v: want the linear monitor's top-1 ≥ 90%% on 3 well separated classes", sum.Monitor)
	}
	if n := mon.Notice(); !strings.Contains(n, "k = 200 is larger than the bank") || !strings.Contains(n, "60 vectors): all 60 vote") {
		t.Errorf("the monitor's notice %q does not say that its k is the bank's size", n)
	}

	// Without queries every tenth bank image is held out.
	held, err := NewKNNMonitor(context.Background(), bankDir, "", KNNMonitorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if held.bank.N != 54 || held.queries.N != 6 || held.cfg.K != 54 {
		t.Errorf("held-out split: bank %d, queries %d, k %d; want 54, 6, 54", held.bank.N, held.queries.N, held.cfg.K)
	}
}

func TestKNNMonitorRejectsMismatchedSets(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	imgs, labels := knnClassImages(1, 6, 6, 6)
	writeKNNShards(t, a, imgs, labels)
	big, bigLabels := knnClassImages(1, 6, 8, 8)
	writeKNNShards(t, b, big, bigLabels)
	if _, err := NewKNNMonitor(context.Background(), a, b, KNNMonitorOptions{}); err == nil || !strings.Contains(err.Error(), "6x6x1 images but queries") {
		t.Errorf("error = %v, want a size mismatch", err)
	}
}

// TestKNNMonitorSamplesAFixedSubset checks the default monitor: a sample of each split, the same
// images on every call with one seed (so epochs and runs are compared on the same images),
// others with another seed, the whole splits with Full, and the sample's size in the log.
func TestKNNMonitorSamplesAFixedSubset(t *testing.T) {
	ctx := context.Background()
	bankDir, queryDir := t.TempDir(), t.TempDir()
	bankImgs, bankLabels := knnClassImages(1, 300, 6, 6)
	writeKNNShards(t, bankDir, bankImgs, bankLabels)
	qImgs, qLabels := knnClassImages(2, 120, 6, 6)
	writeKNNShards(t, queryDir, qImgs, qLabels)

	a, err := NewKNNMonitor(ctx, bankDir, queryDir, KNNMonitorOptions{Bank: 100, Queries: 40, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	if a.bank.N != 100 || a.queries.N != 40 || len(a.bank.Labels) != 100 || len(a.bank.Images) != 100*36 || a.Images() != 140 {
		t.Fatalf("sample: bank %d (%d labels, %d bytes), queries %d, Images %d; want 100, 40, 140", a.bank.N, len(a.bank.Labels), len(a.bank.Images), a.queries.N, a.Images())
	}
	// Every sampled image is the split's image with its own label, in the split's order.
	last := -1
	for i := range a.bank.N {
		j := knnIndexOfImage(bankImgs, a.bank.Images[i*36:(i+1)*36])
		if j <= last || bankLabels[j] != a.bank.Labels[i] {
			t.Fatalf("bank image %d is split image %d (after %d) with label %d, want its label %d in order", i, j, last, a.bank.Labels[i], bankLabels[max(j, 0)])
		}
		last = j
	}
	again, err := NewKNNMonitor(ctx, bankDir, queryDir, KNNMonitorOptions{Bank: 100, Queries: 40, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	if string(again.bank.Images) != string(a.bank.Images) || string(again.queries.Images) != string(a.queries.Images) {
		t.Error("the same seed drew another sample")
	}
	other, err := NewKNNMonitor(ctx, bankDir, queryDir, KNNMonitorOptions{Bank: 100, Queries: 40, Seed: 4})
	if err != nil {
		t.Fatal(err)
	}
	if string(other.bank.Images) == string(a.bank.Images) {
		t.Error("another seed drew the same sample")
	}
	full, err := NewKNNMonitor(ctx, bankDir, queryDir, KNNMonitorOptions{Bank: 100, Queries: 40, Full: true})
	if err != nil {
		t.Fatal(err)
	}
	if full.bank.N != 300 || full.queries.N != 120 || full.sampled {
		t.Errorf("full: bank %d, queries %d, sampled %v; want 300, 120, false", full.bank.N, full.queries.N, full.sampled)
	}
	// The defaults exceed these splits: both are used whole, and nothing says "sample".
	def, err := NewKNNMonitor(ctx, bankDir, queryDir, KNNMonitorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if def.bank.N != 300 || def.queries.N != 120 || def.sampled {
		t.Errorf("defaults on small splits: bank %d, queries %d, sampled %v", def.bank.N, def.queries.N, def.sampled)
	}

	// The log line says the figure is a sample's.
	backend, err := gpu.New(ctx, gpu.Options{Kind: gpu.CPU, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Finalize()
	s, err := NewStep(backend, StepConfig{
		Model:     ModelConfig{Name: MLP, BaseWidth: 8, Channels: 1},
		Loss:      LossConfig{Kind: DCL, Temperature: 0.2},
		Optimizer: OptimizerConfig{Kind: SGDMomentum, Momentum: 0.9},
	}, 6, 6)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Finalize()
	res, err := a.Run(ctx, 0, s, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res["knn_bank"] != 100 || res["knn_queries"] != 40 || res["knn_k"] != 100 {
		t.Errorf("monitor result %v: want knn_bank 100, knn_queries 40, knn_k 100", res)
	}
	if _, ok := res["linear_top1"]; ok {
		t.Errorf("monitor result %v: a linear figure without KNNMonitorOptions.Linear", res)
	}
}

func knnIndexOfImage(imgs []transforms.Image, pix []uint8) int {
	for i, img := range imgs {
		if string(img.Pix) == string(pix) {
			return i
		}
	}
	return -1
}
