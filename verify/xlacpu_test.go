//go:build cuda

package verify

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/dcl-beam/dcl-beam/analysis"
	"github.com/dcl-beam/dcl-beam/gpu"
	"github.com/dcl-beam/dcl-beam/internal/testing/encodertest"
	"github.com/dcl-beam/dcl-beam/internal/testing/xlacputest"
	"github.com/dcl-beam/dcl-beam/trainstep"
	"github.com/gomlx/compute"
)

// TestXLACPUStepAgreement is the GPU check's float32 agreement row with XLA's CPU plugin as
// the backend under test: one training step's loss and gradients on xla-cpu against the
// CPU backend's float64-free reference, within Headroom times the CPU's own float32 floor
// (Winograd against direct convolutions), for resnet18-cifar and small-cnn.
func TestXLACPUStepAgreement(t *testing.T) {
	xlacputest.Require(t)
	for _, model := range []string{trainstep.ResNet18CIFAR, trainstep.SmallCNN} {
		t.Run(model, func(t *testing.T) {
			p := Phase{Kind: "agreement", Backend: string(gpu.XLACPU), Model: model, Width: 4, Size: 32, Batch: 4, Channels: 3,
				Precision: string(trainstep.Float32), Seed: 11}
			r, err := runAgreement(context.Background(), p)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: loss %.7g vs %.7g; spread ‖g‖² %.2g, max %.2g, sum %.2g; tolerances %.2g, %.2g, %.2g; %.2f× the float32 floor",
				model, r.Loss, r.LossRef, r.Spread.SumSquares, r.Spread.MaxAbs, r.Spread.Sum,
				r.Tolerances.SumSquares, r.Tolerances.MaxAbs, r.Tolerances.Sum, r.FloorRatio)
			if !r.Pass {
				t.Errorf("xla-cpu disagrees with the CPU: %v", r.Failures)
			}
			if r.Variables == 0 || !(r.Spread.SumSquares > 0) {
				t.Errorf("%d variables compared, spread %v: nothing was compared", r.Variables, r.Spread)
			}
		})
	}
}

// smallCNNEncoder trains a small-cnn encoder on the CPU for a few steps and returns its run
// folder, with the labelled shards to embed.
func smallCNNEncoder(t *testing.T) (run, train, test string) {
	t.Helper()
	dir := t.TempDir()
	pairs := filepath.Join(dir, "pairs")
	train, test = filepath.Join(dir, "train"), filepath.Join(dir, "test")
	encodertest.WritePairShards(t, pairs, 48, 8, 2, 1, 1)
	encodertest.WritePairShards(t, train, 60, 8, 1, 1, 2)
	encodertest.WritePairShards(t, test, 30, 8, 1, 1, 1)
	run = encodertest.TrainTinyCNNEncoder(t, pairs)
	return run, train, test
}

// TestXLACPUAgree is `dcl agree --a=xla-cpu --b=cpu`: a small-cnn encoder's embeddings on XLA's
// CPU plugin and on the CPU backend agree within the tolerance the error model derives, and
// kNN and the linear probe on them stay within their bounds.
func TestXLACPUAgree(t *testing.T) {
	xlacputest.Require(t)
	run, train, test := smallCNNEncoder(t)
	res, err := Agree(context.Background(), AgreeOptions{
		Checkpoint: run, Train: train, Test: test, Feature: trainstep.Backbone, A: string(gpu.XLACPU), B: string(gpu.CPU),
		Bank: 40, Queries: 20, Seed: 1, KNN: analysis.KNNConfig{K: 5, Temperature: 0.1},
		Linear: analysis.DefaultLinearConfig().WithEpochs(3), Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("tolerance %.3g; largest difference %.3g (bank), %.3g (queries); kNN %.1f vs %.1f (bound %.1f)",
		res.Tolerance, res.Bank.Max, res.Queries.Max, res.A.KNNTop1, res.B.KNNTop1, res.KNN.Bound)
	if !res.OK {
		t.Errorf("xla-cpu and cpu do not agree: %+v", res)
	}
	if res.A.Arithmetic != Float32Arithmetic || res.Bank.Rows != 40 || !(res.Bank.Max > 0) {
		t.Errorf("arithmetic %+v, %d rows, largest difference %v: want float32 on xla-cpu, 40 rows, and rounding showing",
			res.A.Arithmetic, res.Bank.Rows, res.Bank.Max)
	}
}

// TestXLACPUKNNMonitor: the trainer's kNN monitor on xla-cpu embeds as the CPU backend does,
// within the error model's tolerance, and its top-1 differs by no more than the decisions
// that tolerance could flip.
func TestXLACPUKNNMonitor(t *testing.T) {
	xlacputest.Require(t)
	var sides []monitorSide
	for _, kind := range []gpu.Kind{gpu.CPU, gpu.XLACPU} {
		be, err := gpu.New(context.Background(), gpu.Options{Kind: kind, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(be.Finalize)
		sides = append(sides, monitorSide{name: string(kind), backend: be, devices: 1})
	}
	checkKNNMonitor(t, sides...)
}

// TestXLACPUKNNMonitorOnDevices: the kNN monitor reads the same with a training step on 2 and
// 4 of xla-cpu's devices as on one: each image's features within the error model's tolerance,
// top-1 within the decisions it could flip. The 30 queries do not split over 4 devices: the
// step pads them and drops the padding's rows.
func TestXLACPUKNNMonitorOnDevices(t *testing.T) {
	be := xlacputest.Backend(t, gpu.Options{Devices: 4})
	var sides []monitorSide
	for _, d := range []int{1, 2, 4} {
		sides = append(sides, monitorSide{name: fmt.Sprintf("xla-cpu on %d device(s)", d), backend: be, devices: d})
	}
	checkKNNMonitor(t, sides...)
}

// monitorSide is a backend and how many of its devices the monitored step runs on.
type monitorSide struct {
	name    string
	backend compute.Backend
	devices int
}

// checkKNNMonitor runs the kNN monitor with a small-cnn encoder's step on each side and
// checks every side against the first: each bank and query image's backbone features within
// the error model's tolerance for two float32 computations, and the monitor's top-1 apart by
// no more than the decisions that tolerance could flip.
func checkKNNMonitor(t *testing.T, sides ...monitorSide) {
	t.Helper()
	ctx := context.Background()
	run, train, test := smallCNNEncoder(t)
	path, err := trainstep.ResolveCheckpoint(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	ckpt, err := trainstep.ReadCheckpoint(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	model, err := NewErrorModel(ctx, path, trainstep.Backbone)
	if err != nil {
		t.Fatal(err)
	}
	mon, err := trainstep.NewKNNMonitor(ctx, train, test, trainstep.KNNMonitorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bankImgs, err := trainstep.ReadLabeledImages(ctx, train)
	if err != nil {
		t.Fatal(err)
	}
	queryImgs, err := trainstep.ReadLabeledImages(ctx, test)
	if err != nil {
		t.Fatal(err)
	}
	top1 := make([]float64, len(sides))
	emb := make([][2]analysis.LabeledVectors, len(sides)) // [side][bank, queries]
	for i, side := range sides {
		s, err := trainstep.NewStepOn(side.backend, side.devices, ckpt.Header.Step, ckpt.Header.State.ImageHeight, ckpt.Header.State.ImageWidth)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Finalize()
		if err := ckpt.Restore(s); err != nil {
			t.Fatal(err)
		}
		res, err := mon.Run(ctx, 1, s, nil)
		if err != nil {
			t.Fatal(err)
		}
		top1[i] = res["knn_top1"].(float64)
		for j, imgs := range []*trainstep.LabeledImages{bankImgs, queryImgs} {
			if emb[i][j], err = stepFeatures(s, imgs); err != nil {
				t.Fatal(err)
			}
		}
	}
	tol := model.Tolerance(Float32Arithmetic, Float32Arithmetic)
	// The monitor's settings, k one less than the whole bank, which KNNUnstable needs to find
	// the k-th neighbour's rival.
	cfg := analysis.DefaultKNNConfig()
	cfg.K = min(cfg.K, bankImgs.N-1)
	unstable, err := KNNUnstable(emb[0][0], emb[0][1], cfg, tol)
	if err != nil {
		t.Fatal(err)
	}
	for i, side := range sides[1:] {
		i++
		for j, what := range []string{"bank", "queries"} {
			d, err := CompareVectors(emb[i][j].Vectors, emb[0][j].Vectors)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s against %s, %s features: largest relative difference %.3g (tolerance %.3g)", side.name, sides[0].name, what, d.Max, tol)
			if d.Max > tol {
				t.Errorf("%s against %s, %s features: largest relative difference %.3g over the tolerance %.3g", side.name, sides[0].name, what, d.Max, tol)
			}
		}
		t.Logf("kNN monitor top-1: %s %.2f, %s %.2f; %d decisions the tolerance %.3g could flip", side.name, top1[i], sides[0].name, top1[0], unstable, tol)
		if b := bound(top1[0], top1[i], unstable, queryImgs.N); !b.Within {
			t.Errorf("kNN monitor top-1 %.2f on %s, %.2f on %s: more apart than %d flipped decisions allow", top1[i], side.name, top1[0], sides[0].name, unstable)
		}
	}
}

// stepFeatures is the backbone features of imgs from a training step's model, as the kNN
// monitor takes them.
func stepFeatures(s *trainstep.Step, imgs *trainstep.LabeledImages) (analysis.LabeledVectors, error) {
	feats, _, err := s.Features(imgs.Images, imgs.N, imgs.H, imgs.W, imgs.C)
	if err != nil {
		return analysis.LabeledVectors{}, err
	}
	v, err := analysis.VectorsFromRows(feats, imgs.Source)
	return analysis.LabeledVectors{Source: imgs.Source, Vectors: v, Labels: imgs.Labels}, err
}
