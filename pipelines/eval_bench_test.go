package pipelines

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"testing"

	"github.com/dcl-beam/dcl-beam/analysis"
	"github.com/dcl-beam/dcl-beam/gpu"
	"github.com/dcl-beam/dcl-beam/internal/cputime"
	"github.com/dcl-beam/dcl-beam/shards"
	"github.com/dcl-beam/dcl-beam/trainstep"
	"github.com/dcl-beam/dcl-beam/transforms"
)

// BenchmarkKNNBeamOverhead compares the kNN pipeline on prism with the same evaluation as a
// plain loop (read both files, analysis.KNN), on embedding files of 5,000 test and 50,000
// training 128-d vectors (tiny under -short). The difference is Beam's cost: job
// submission, the encoded blocks, the shuffle and the extra reads of the bank.
func BenchmarkKNNBeamOverhead(b *testing.B) {
	nTest, nTrain, dim := 5000, 50000, 128
	if testing.Short() {
		nTest, nTrain, dim = 200, 1000, 16
	}
	dir := b.TempDir()
	trainDir, testFile := filepath.Join(dir, "train"), filepath.Join(dir, "test.parquet")
	writeEmbeddings(b, trainDir, clustered(21, "train", nTrain, dim, 10), 4, nil)
	writeEmbeddings(b, testFile, clustered(22, "test", nTest, dim, 10), 1, nil)
	ctx := context.Background()
	var loopRes, beamRes *analysis.KNNResult
	b.Run(fmt.Sprintf("loop/%dx%dx%d", nTest, nTrain, dim), func(b *testing.B) {
		for b.Loop() {
			train, _, err := LoadEmbeddings(ctx, trainDir)
			if err != nil {
				b.Fatal(err)
			}
			test, _, err := LoadEmbeddings(ctx, testFile)
			if err != nil {
				b.Fatal(err)
			}
			if loopRes, err = analysis.KNN(train, test, analysis.KNNConfig{NumClasses: 10}); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, groups := range []int{1, 4} {
		b.Run(fmt.Sprintf("beam-prism/%dx%dx%d/bankgroups=%d", nTest, nTrain, dim, groups), func(b *testing.B) {
			for b.Loop() {
				job, err := PlanKNN(ctx, KNNOptions{Train: trainDir, Test: testFile, NumClasses: 10, BankGroups: groups})
				if err != nil {
					b.Fatal(err)
				}
				if beamRes, err = RunKNN(ctx, job); err != nil {
					b.Fatal(err)
				}
			}
		})
		if loopRes != nil && beamRes != nil && (loopRes.Top1 != beamRes.Top1 || loopRes.Top5 != beamRes.Top5) {
			b.Errorf("the pipeline's accuracy %.2f/%.2f differs from the loop's %.2f/%.2f", beamRes.Top1, beamRes.Top5, loopRes.Top1, loopRes.Top5)
		}
	}
}

// BenchmarkEmbed measures embedding throughput on the CPU backend: a resnet18-cifar encoder
// (untrained weights: the work is the same) over 512 CIFAR-sized images (32 under -short,
// with the MLP), as a plain loop over the shards (encoder.Embed per batch) and as the embed
// pipeline on prism.
// embedImages is BenchmarkEmbed's job size: large enough that the job's start is a small part
// of it, as in a real embedding job.
var embedImages = flag.Int("embed-images", 10000, "images BenchmarkEmbed embeds (resnet18-cifar, 32×32)")

// BenchmarkEmbed compares `dcl embed`'s pipeline on prism with the encoder alone in a loop over
// the same shards: the pipeline's cost is the ratio of their rates.
func BenchmarkEmbed(b *testing.B) {
	ctx := context.Background()
	model, n, size, channels := trainstep.ResNet18CIFAR, *embedImages, 32, 3
	if testing.Short() {
		model, n, size, channels = trainstep.MLP, 32, 8, 1
	}
	data := b.TempDir()
	writeImageShards(b, data, n, size, channels)
	backend, err := gpu.New(ctx, gpu.Options{Kind: gpu.CPU, Logger: discardLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer backend.Finalize()
	cfg := trainstep.StepConfig{
		Model:     trainstep.ModelConfig{Name: model, ProjectionDim: 128, Channels: channels},
		Loss:      trainstep.DefaultLossConfig(),
		Optimizer: trainstep.OptimizerConfig{Kind: trainstep.SGDMomentum, Momentum: 0.9},
		InitSeed:  1,
	}
	step, err := trainstep.NewStep(backend, cfg, size, size)
	if err != nil {
		b.Fatal(err)
	}
	ckpt := filepath.Join(b.TempDir(), trainstep.CheckpointName(0))
	err = trainstep.SaveCheckpoint(ctx, ckpt, step, nil, trainstep.TrainState{ImageHeight: size, ImageWidth: size})
	step.Finalize()
	if err != nil {
		b.Fatal(err)
	}
	b.Run(fmt.Sprintf("loop/%s", model), func(b *testing.B) {
		enc, err := trainstep.LoadEncoder(ctx, backend, ckpt)
		if err != nil {
			b.Fatal(err)
		}
		defer enc.Close()
		cpu := cputime.Process().Seconds()
		for b.Loop() {
			r, err := shards.NewSequentialReader(ctx, data, trainstep.EncoderMaxBatch)
			if err != nil {
				b.Fatal(err)
			}
			for {
				batch, err := r.Next()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					b.Fatal(err)
				}
				images := make([]transforms.Image, batch.Len)
				for i := range images {
					images[i] = batch.Image(1, i)
				}
				if _, err := enc.Embed(images, trainstep.Backbone); err != nil {
					b.Fatal(err)
				}
			}
			r.Close()
		}
		reportImageRates(b, n, cpu)
	})
	b.Run(fmt.Sprintf("beam-prism/%s", model), func(b *testing.B) {
		cpu := cputime.Process().Seconds()
		for b.Loop() {
			job, err := PlanEmbed(ctx, EmbedOptions{Checkpoint: ckpt, Data: data, Output: filepath.Join(b.TempDir(), "emb")})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := RunEmbed(ctx, job); err != nil {
				b.Fatal(err)
			}
		}
		reportImageRates(b, n, cpu)
	})
}

// reportImageRates reports images per second of wall time and per CPU-second.
func reportImageRates(b *testing.B, n int, cpuStart float64) {
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "images/s")
	if cpu := cputime.Process().Seconds() - cpuStart; cpuStart > 0 && cpu > 0 {
		b.ReportMetric(float64(n)*float64(b.N)/cpu, "images/cpu-s")
	}
}

// writeImageShards writes n single-view size×size images (labels i%10) in one shard.
func writeImageShards(tb testing.TB, dir string, n, size, channels int) {
	tb.Helper()
	ctx := context.Background()
	cfg := shards.Config{
		Dataset: "cifar10", Split: "test", Preset: "none", Augment: json.RawMessage(`{}`),
		Seed: 1, Passes: 1, Parts: 1, Views: 1, Encoding: shards.Raw, Height: size, Width: size, Channels: channels,
		CodeVersion: "bench", SourceChecksum: "sha256:00",
	}
	if err := shards.Prepare(ctx, dir, cfg, false); err != nil {
		tb.Fatal(err)
	}
	w, err := shards.NewWriter(ctx, dir, shards.ShardID{Pass: 0, Part: 0, Parts: 1}, cfg, shards.WriterOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	for i := range n {
		img := transforms.NewImage(size, size, channels)
		for p := range img.Pix {
			img.Pix[p] = uint8(p*7 + i*13)
		}
		if err := w.WriteViews(fmt.Sprintf("k%05d", i), int64(i), int32(i%10), img, transforms.Image{}); err != nil {
			tb.Fatal(err)
		}
	}
	info, err := w.Close()
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := shards.Commit(ctx, dir, cfg, []shards.ShardInfo{info}, int64(n), shards.DeadLetters{}); err != nil {
		tb.Fatal(err)
	}
}
