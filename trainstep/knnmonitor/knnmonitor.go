// Package knnmonitor measures, during pretraining, the weighted kNN accuracy of the encoder's
// backbone features on held-out labelled images (the InstDisc/MoCo CIFAR protocol: cosine
// similarity, k = 200, vote weight exp(sim/0.1)), with package analysis's kNN. It is a
// separate package because analysis's tests use trainstep.
package knnmonitor

import (
	"context"
	"fmt"

	"github.com/dcl-beam/dcl-beam/analysis"
	"github.com/dcl-beam/dcl-beam/internal/progress"
	"github.com/dcl-beam/dcl-beam/trainstep"
)

// chunk is the number of images encoded at once.
const chunk = 256

// Monitor holds the bank (the labelled images whose features vote) and the queries (the
// images classified), both in memory.
type Monitor struct {
	bank, queries *trainstep.LabeledImages
	cfg           analysis.KNNConfig
}

// New reads the bank from bankDir and the queries from queryDir (shard directories, usually
// of preset none). With queryDir empty, every tenth image of the bank is held out as a query
// and the rest vote.
func New(ctx context.Context, bankDir, queryDir string) (*Monitor, error) {
	bank, err := trainstep.ReadLabeledImages(ctx, bankDir)
	if err != nil {
		return nil, err
	}
	var queries *trainstep.LabeledImages
	if queryDir == "" {
		bank, queries = split(bank, 10)
	} else if queries, err = trainstep.ReadLabeledImages(ctx, queryDir); err != nil {
		return nil, err
	}
	if queries.H != bank.H || queries.W != bank.W || queries.C != bank.C {
		return nil, fmt.Errorf("kNN bank %s has %dx%dx%d images but queries %s have %dx%dx%d",
			bank.Source, bank.H, bank.W, bank.C, queries.Source, queries.H, queries.W, queries.C)
	}
	if bank.N < 1 || queries.N < 1 {
		return nil, fmt.Errorf("kNN monitor needs at least one bank image and one query (%s: %d and %d)", bank.Source, bank.N, queries.N)
	}
	cfg := analysis.DefaultKNNConfig()
	cfg.K = min(cfg.K, bank.N)
	return &Monitor{bank: bank, queries: queries, cfg: cfg}, nil
}

// split holds out every k-th image as a query.
func split(all *trainstep.LabeledImages, k int) (bank, queries *trainstep.LabeledImages) {
	size := all.H * all.W * all.C
	bank = &trainstep.LabeledImages{Source: all.Source, H: all.H, W: all.W, C: all.C}
	queries = &trainstep.LabeledImages{Source: all.Source + " (every 10th image)", H: all.H, W: all.W, C: all.C}
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
func (m *Monitor) Check(model *trainstep.Model) error {
	if err := model.CheckImageSize(m.bank.H, m.bank.W, m.bank.C); err != nil {
		return fmt.Errorf("kNN data %s: %w", m.bank.Source, err)
	}
	return nil
}

// Run encodes bank and queries with the step's current weights (inference mode) and returns
// the kNN accuracy as log fields: knn_top1, knn_top5 (percent), knn_k. It shows the images
// it encodes as a stage of the training's progress p.
func (m *Monitor) Run(ctx context.Context, epoch int, s *trainstep.Step, p *progress.Reporter) (map[string]any, error) {
	p = p.Sub(fmt.Sprintf("kNN monitor after epoch %d", epoch), int64(m.bank.N+m.queries.N), "images")
	defer p.End() // after Finish, nothing
	bank, err := features(ctx, s, m.bank, p)
	if err != nil {
		return nil, err
	}
	queries, err := features(ctx, s, m.queries, p)
	if err != nil {
		return nil, err
	}
	res, err := analysis.KNN(bank, queries, m.cfg)
	if err != nil {
		return nil, err
	}
	p.Finish()
	return map[string]any{"knn_top1": res.Top1, "knn_top5": res.Top5, "knn_k": res.K}, nil
}

func features(ctx context.Context, s *trainstep.Step, imgs *trainstep.LabeledImages, p *progress.Reporter) (analysis.LabeledVectors, error) {
	size := imgs.H * imgs.W * imgs.C
	var rows [][]float32
	for from := 0; from < imgs.N; from += chunk {
		if err := ctx.Err(); err != nil {
			return analysis.LabeledVectors{}, err
		}
		n := min(chunk, imgs.N-from)
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
