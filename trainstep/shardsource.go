package trainstep

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/shards"
)

// ShardSource is a BatchSource over a shard directory written by `dcl preprocess` (local or
// gs://), read through shards.Reader: shuffled, streamed, decoded ahead of the trainer. On
// base shards (`dcl preprocess --views=online`) the reader makes each epoch's views as it
// reads, the views a dataset of stored passes holds in pass e, in the same order.
type ShardSource struct {
	dir    string
	m      *shards.Manifest
	info   SourceInfo
	window int
}

// OpenShards opens a dataset of view pairs for training. A folder without a manifest, a
// dataset of single views (evaluation shards, a SetupError) or an empty one (a SetupError) is
// an error naming it.
func OpenShards(ctx context.Context, dir string) (*ShardSource, error) {
	m, err := shards.ReadManifest(ctx, dir)
	if err != nil {
		return nil, err
	}
	raw, err := storage.ReadFile(ctx, storage.Join(dir, shards.ManifestName))
	if err != nil {
		return nil, err
	}
	c := m.Config
	if c.Views != 2 {
		return nil, setupErr(fmt.Errorf("dataset %s holds single views (preset %s): training needs view pairs (preprocess with an augmentation preset)", dir, c.Preset))
	}
	perPass := m.Records - m.DeadLetters.Count
	if perPass <= 0 || m.Rows == 0 {
		return nil, setupErr(fmt.Errorf("dataset %s is empty: no view pairs to train on", dir))
	}
	sum := sha256.Sum256(raw)
	window := shards.DefaultWindow
	passes := c.Passes
	if c.Online {
		passes = OnlinePasses
	}
	return &ShardSource{
		dir: dir, m: m, window: window,
		info: SourceInfo{
			Examples: int(perPass), Passes: passes, Height: c.Height, Width: c.Width, Channels: c.Channels,
			Dataset: c.Dataset, Views: c.TrainerViews(),
			// The order of an epoch depends on the manifest and the reader's window.
			Fingerprint: fmt.Sprintf("manifest-sha256:%s/window:%d", hex.EncodeToString(sum[:]), window),
		},
	}, nil
}

// Manifest returns the dataset's manifest.
func (s *ShardSource) Manifest() *shards.Manifest { return s.m }

// Info implements BatchSource.
func (s *ShardSource) Info() SourceInfo { return s.info }

// Batches implements BatchSource: batch start begins at row start·batchSize of the epoch's
// shuffled order.
func (s *ShardSource) Batches(ctx context.Context, epoch int, seed uint64, batchSize, start int) (BatchIterator, error) {
	r, err := shards.NewReader(ctx, s.dir, shards.ReaderOptions{
		BatchSize: batchSize, Seed: seed, Epoch: epoch, Start: int64(start) * int64(batchSize), Window: s.window,
	})
	if err != nil {
		return nil, err
	}
	return &shardIterator{r: r}, nil
}

type shardIterator struct{ r *shards.Reader }

func (it *shardIterator) Next() (*Batch, error) {
	b, err := it.r.Next()
	if err != nil {
		return nil, err
	}
	return &Batch{View1: b.View1, View2: b.View2, Labels: b.Labels, N: b.Len, H: b.H, W: b.W, C: b.C}, nil
}

func (it *shardIterator) Close() error { return it.r.Close() }

// LabeledImages is a labelled image set in memory, for the kNN monitor.
type LabeledImages struct {
	Source string
	Images []uint8 // N·H·W·C
	Labels []int32
	N      int
	H, W   int
	C      int
}

// ReadLabeledImages reads every row's first view and label of a shard directory in manifest
// order (evaluation shards of preset none, usually). Rows without a label are an error: a
// kNN monitor needs classes.
func ReadLabeledImages(ctx context.Context, dir string) (*LabeledImages, error) {
	r, err := shards.NewSequentialReader(ctx, dir, 256)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	c := r.Manifest().Config
	out := &LabeledImages{Source: dir, H: c.Height, W: c.Width, C: c.Channels}
	for {
		b, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		for i, l := range b.Labels {
			if l < 0 {
				return nil, fmt.Errorf("dataset %s: row %s has no label: a kNN monitor needs labelled images", dir, b.Keys[i])
			}
		}
		out.Images = append(out.Images, b.View1...)
		out.Labels = append(out.Labels, b.Labels...)
		out.N += b.Len
	}
	if out.N == 0 {
		return nil, fmt.Errorf("dataset %s is empty", dir)
	}
	return out, nil
}
