package trainstep

// The kNN monitor measures, during pretraining, the weighted kNN accuracy of the encoder's
// backbone features on held-out labelled images (MoCo's CIFAR monitor: cosine similarity,
// k = 200, vote weight exp(sim/0.1)), with package analysis's kNN.
//
// By default it embeds a fixed, seeded sample of the splits (KNNMonitorOptions):
// DefaultKNNBank images vote, DefaultKNNQueries are classified. The monitor is a trend, read
// epoch against epoch and run against run, not the result: the full evaluation after
// training (dcl embed, knn) is.
// What a trend needs is the same images every time and a noise small next to the changes it
// shows, and that costs far less than the full splits: with 2,048 queries the standard error
// of an accuracy near 80% is sqrt(0.8·0.2/2048) = 0.9 points (and an epoch-to-epoch change,
// measured on the same queries, is less noisy than that), while 6,144 voters leave each of 10
// classes about 600, of which its 200 nearest vote. The size is set by what a CPU run can
// afford: 8,192 images a run is under a tenth of the demo's training time (a forward pass
// costs about a quarter of a training image's step there), where its full splits, 70,000
// images every two epochs, cost half of it. solo-learn's and lightly's kNN callbacks,
// written for GPUs, embed whole splits; on a GPU that costs little, and the full splits stay
// one option away (KNNMonitorOptions.Full; dcl train --knn-full, a config's
// evaluate.knn_monitor.full).
// A sampled monitor reads somewhat below the full-split kNN accuracy (a smaller bank), so its
// curve and the final figure are not to be compared.

import (
	"context"
	"fmt"

	"github.com/dcl-beam/dcl-beam/analysis"
	"github.com/dcl-beam/dcl-beam/internal/progress"
)

// knnChunk is the number of images encoded at once.
const knnChunk = 256

// The default sample (see above): whole encoder calls of 256 images.
const (
	DefaultKNNBank    = 6144
	DefaultKNNQueries = 2048
	DefaultKNNSeed    = 1
)

// KNNMonitorOptions choose the images the monitor embeds.
type KNNMonitorOptions struct {
	// Bank and Queries are how many images vote and are classified, a sample drawn once with
	// Seed (0: DefaultKNNBank, DefaultKNNQueries, DefaultKNNSeed); a split with fewer is used
	// whole.
	Bank, Queries int
	Seed          uint64
	// Full uses every image of both splits.
	Full bool
	// Linear also fits a linear classifier to the bank's features each time and classifies
	// the queries with it (analysis.MonitorLinearConfig): the linear accuracy during
	// training, beside the kNN's.
	Linear bool
}

func (o KNNMonitorOptions) withDefaults() KNNMonitorOptions {
	if o.Bank <= 0 {
		o.Bank = DefaultKNNBank
	}
	if o.Queries <= 0 {
		o.Queries = DefaultKNNQueries
	}
	if o.Seed == 0 {
		o.Seed = DefaultKNNSeed
	}
	return o
}

// KNNMonitor holds the bank (the labelled images whose features vote) and the queries (the
// images classified), both in memory.
type KNNMonitor struct {
	bank, queries *LabeledImages
	cfg           analysis.KNNConfig
	// notice says where the monitor departs from its protocol (analysis.KNNConfig.FitK).
	notice string
	// sampled says the bank and queries are samples (their sizes go in the log).
	sampled bool
	// linear fits the monitor's linear probe too (KNNMonitorOptions.Linear).
	linear bool
}

// NewKNNMonitor reads the bank from bankDir and the queries from queryDir (shard
// directories, usually of preset none), and keeps the sample o asks for. With queryDir empty,
// every tenth image of the bank is held out as a query and the rest vote.
func NewKNNMonitor(ctx context.Context, bankDir, queryDir string, o KNNMonitorOptions) (*KNNMonitor, error) {
	o = o.withDefaults()
	bank, err := ReadLabeledImages(ctx, bankDir)
	if err != nil {
		return nil, err
	}
	var queries *LabeledImages
	if queryDir == "" {
		bank, queries = holdOut(bank, 10)
	} else if queries, err = ReadLabeledImages(ctx, queryDir); err != nil {
		return nil, err
	}
	sampled := false
	if !o.Full {
		sampled = bank.N > o.Bank || queries.N > o.Queries
		// Bank and queries get draws of their own: the same bank whatever the query count.
		bank = bank.Sample(o.Bank, o.Seed, 1)
		queries = queries.Sample(o.Queries, o.Seed, 2)
	}
	if queries.H != bank.H || queries.W != bank.W || queries.C != bank.C {
		return nil, fmt.Errorf("kNN bank %s has %dx%dx%d images but queries %s have %dx%dx%d",
			bank.Source, bank.H, bank.W, bank.C, queries.Source, queries.H, queries.W, queries.C)
	}
	if bank.N < 1 || queries.N < 1 {
		return nil, fmt.Errorf("kNN monitor needs at least one bank image and one query (%s: %d and %d)", bank.Source, bank.N, queries.N)
	}
	cfg, notice := analysis.DefaultKNNConfig().FitK(bank.N, bank.Source)
	return &KNNMonitor{bank: bank, queries: queries, cfg: cfg, sampled: sampled, notice: notice, linear: o.Linear}, nil
}

// Notice says where the monitor departs from its protocol (a bank smaller than k), for the
// run's log; "" where it does not.
func (m *KNNMonitor) Notice() string { return m.notice }

// Images is the number of images one Run embeds.
func (m *KNNMonitor) Images() int64 { return int64(m.bank.N + m.queries.N) }

// holdOut holds out every k-th image as a query.
func holdOut(all *LabeledImages, k int) (bank, queries *LabeledImages) {
	size := all.H * all.W * all.C
	bank = &LabeledImages{Source: all.Source, H: all.H, W: all.W, C: all.C}
	queries = &LabeledImages{Source: all.Source + " (every 10th image)", H: all.H, W: all.W, C: all.C}
	for i := 0; i < all.N; i++ {
		dst := bank
		if i%k == 0 {
			dst = queries
		}
		dst.Images = append(dst.Images, all.Images[i*size:(i+1)*size]...)
		dst.Labels = append(dst.Labels, all.Labels[i])
		dst.N++
	}
	return bank, queries
}

// Check reports images the model cannot take.
func (m *KNNMonitor) Check(model *Model) error {
	if err := model.CheckImageSize(m.bank.H, m.bank.W, m.bank.C); err != nil {
		return fmt.Errorf("kNN data %s: %w", m.bank.Source, err)
	}
	return nil
}

// Run encodes bank and queries with the step's current weights (inference mode), after
// epoch epochs completed, and returns
// the kNN accuracy as log fields: knn_top1, knn_top5 (percent), knn_k; with
// KNNMonitorOptions.Linear, the monitor's linear probe's too: linear_top1, linear_top5. It
// shows the images it encodes as a stage of the training's progress p.
func (m *KNNMonitor) Run(ctx context.Context, epoch int, s *Step, p *progress.Reporter) (map[string]any, error) {
	p = p.Sub(fmt.Sprintf("kNN monitor after epoch %d", epoch), int64(m.bank.N+m.queries.N), "images")
	defer p.End() // after Finish, nothing
	bank, err := knnFeatures(ctx, s, m.bank, p)
	if err != nil {
		return nil, err
	}
	queries, err := knnFeatures(ctx, s, m.queries, p)
	if err != nil {
		return nil, err
	}
	res, err := analysis.KNN(bank, queries, m.cfg)
	if err != nil {
		return nil, err
	}
	out := map[string]any{"knn_top1": res.Top1, "knn_top5": res.Top5, "knn_k": res.K}
	if m.linear {
		cfg := analysis.MonitorLinearConfig()
		cfg.NumClasses = m.cfg.NumClasses
		lin, _, err := analysis.LinearProbe(bank, queries, cfg)
		if err != nil {
			return nil, fmt.Errorf("linear monitor: %w", err)
		}
		out["linear_top1"], out["linear_top5"] = lin.Top1, lin.Top5
	}
	p.Finish()
	if m.sampled {
		out["knn_bank"], out["knn_queries"] = m.bank.N, m.queries.N
	}
	return out, nil
}

func knnFeatures(ctx context.Context, s *Step, imgs *LabeledImages, p *progress.Reporter) (analysis.LabeledVectors, error) {
	size := imgs.H * imgs.W * imgs.C
	var rows [][]float32
	for from := 0; from < imgs.N; from += knnChunk {
		if err := ctx.Err(); err != nil {
			return analysis.LabeledVectors{}, err
		}
		n := min(knnChunk, imgs.N-from)
		feats, _, err := s.Features(imgs.Images[from*size:(from+n)*size], n, imgs.H, imgs.W, imgs.C)
		if err != nil {
			return analysis.LabeledVectors{}, fmt.Errorf("kNN monitor on %s: %w", imgs.Source, err)
		}
		rows = append(rows, feats...)
		p.Add(int64(n))
	}
	v, err := analysis.VectorsFromRows(rows, imgs.Source)
	if err != nil {
		return analysis.LabeledVectors{}, err
	}
	return analysis.LabeledVectors{Source: imgs.Source, Vectors: v, Labels: imgs.Labels}, nil
}
