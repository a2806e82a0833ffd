package trainstep

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"

	"github.com/dcl-beam/dcl-beam/transforms"
)

// Batch is N view pairs, each view uint8 HWC, views of one image at the same index.
type Batch struct {
	// View1 and View2 hold N·H·W·C bytes each, image after image.
	View1, View2 []uint8
	// Labels are the images' classes (-1 when unlabelled); may be nil.
	Labels     []int32
	N, H, W, C int
}

// Validate checks the sizes agree.
func (b *Batch) Validate() error {
	size := b.N * b.H * b.W * b.C
	switch {
	case b.N < 1 || b.H < 1 || b.W < 1 || (b.C != 1 && b.C != 3):
		return fmt.Errorf("batch of %d images %dx%dx%d is not a valid shape", b.N, b.H, b.W, b.C)
	case len(b.View1) != size || len(b.View2) != size:
		return fmt.Errorf("batch of %d images %dx%dx%d needs %d bytes per view, has %d and %d", b.N, b.H, b.W, b.C, size, len(b.View1), len(b.View2))
	case b.Labels != nil && len(b.Labels) != b.N:
		return fmt.Errorf("batch of %d images has %d labels", b.N, len(b.Labels))
	}
	return nil
}

// SourceInfo describes a dataset of view pairs.
type SourceInfo struct {
	// Examples is the number of view pairs in one augmented pass.
	Examples int
	// Passes is E, the number of augmented passes stored; epoch e reads pass e mod E. A
	// source that makes every epoch's views on the fly (base shards) has OnlinePasses.
	Passes int
	// Height, Width, Channels are every view's size.
	Height, Width, Channels int
	// Dataset names the source dataset (it picks the input normalisation).
	Dataset string
	// Fingerprint identifies the data (e.g. the manifest's checksum); a resumed run checks it.
	Fingerprint string
	// Views says what the views are (shards.Config.TrainerViews): the run's summary records
	// it, since stored JPEG views and views made on the fly are other pixels.
	Views string
}

// OnlinePasses is SourceInfo.Passes of a source that makes fresh views every epoch: no
// epoch ever repeats another's views.
const OnlinePasses = math.MaxInt32

// BatchSource streams shuffled batches of view pairs. The order of an epoch is a pure function
// of (seed, epoch), so a run can stop anywhere and continue from the same position.
type BatchSource interface {
	Info() SourceInfo
	// Batches streams epoch's batches of batchSize view pairs from pass epoch mod Passes,
	// shuffled by (seed, epoch), starting at batch number start (0-based). The last incomplete
	// batch is dropped: an epoch has Examples/batchSize batches.
	Batches(ctx context.Context, epoch int, seed uint64, batchSize, start int) (BatchIterator, error)
}

// BatchIterator yields batches until io.EOF.
type BatchIterator interface {
	Next() (*Batch, error)
	Close() error
}

// Pair is one example of a MemorySource.
type Pair struct {
	View1, View2 transforms.Image
	Label        int32
}

// MemorySource is a BatchSource over view pairs held in memory: for tests, and for data small
// enough to load whole.
type MemorySource struct {
	passes  [][]Pair
	dataset string
}

// NewMemorySource returns a source over passes (one slice of pairs per augmented pass, all of
// the same length and every view of the same size).
func NewMemorySource(dataset string, passes ...[]Pair) (*MemorySource, error) {
	if len(passes) == 0 || len(passes[0]) == 0 {
		return nil, fmt.Errorf("dataset %q has no examples", dataset)
	}
	ref := passes[0][0].View1
	for p, pairs := range passes {
		if len(pairs) != len(passes[0]) {
			return nil, fmt.Errorf("dataset %q: pass %d has %d examples, pass 0 has %d", dataset, p, len(pairs), len(passes[0]))
		}
		for i, pair := range pairs {
			for _, v := range []transforms.Image{pair.View1, pair.View2} {
				if err := v.Validate(); err != nil {
					return nil, fmt.Errorf("dataset %q pass %d example %d: %w", dataset, p, i, err)
				}
				if v.H != ref.H || v.W != ref.W || v.C != ref.C {
					return nil, fmt.Errorf("dataset %q pass %d example %d is %dx%dx%d, example 0 is %dx%dx%d",
						dataset, p, i, v.H, v.W, v.C, ref.H, ref.W, ref.C)
				}
			}
		}
	}
	return &MemorySource{passes: passes, dataset: dataset}, nil
}

// Info implements BatchSource.
func (s *MemorySource) Info() SourceInfo {
	v := s.passes[0][0].View1
	return SourceInfo{Examples: len(s.passes[0]), Passes: len(s.passes), Height: v.H, Width: v.W, Channels: v.C,
		Dataset: s.dataset, Fingerprint: fmt.Sprintf("memory:%s:%d:%d", s.dataset, len(s.passes), len(s.passes[0]))}
}

// EpochOrder is the order in which an epoch visits n examples: a permutation drawn from a
// generator seeded by (seed, epoch).
func EpochOrder(n int, seed uint64, epoch int) []int {
	return rand.New(rand.NewPCG(seed, uint64(epoch)^0x9e3779b97f4a7c15)).Perm(n)
}

// Batches implements BatchSource.
func (s *MemorySource) Batches(ctx context.Context, epoch int, seed uint64, batchSize, start int) (BatchIterator, error) {
	if batchSize < 1 {
		return nil, fmt.Errorf("batch size %d must be positive", batchSize)
	}
	pairs := s.passes[epoch%len(s.passes)]
	return &memoryIterator{ctx: ctx, pairs: pairs, order: EpochOrder(len(pairs), seed, epoch), batchSize: batchSize, next: start}, nil
}

type memoryIterator struct {
	ctx       context.Context
	pairs     []Pair
	order     []int
	batchSize int
	next      int
}

func (it *memoryIterator) Next() (*Batch, error) {
	if err := it.ctx.Err(); err != nil {
		return nil, err
	}
	lo := it.next * it.batchSize
	if lo+it.batchSize > len(it.order) {
		return nil, io.EOF
	}
	it.next++
	ref := it.pairs[0].View1
	b := &Batch{N: it.batchSize, H: ref.H, W: ref.W, C: ref.C, Labels: make([]int32, it.batchSize)}
	size := ref.H * ref.W * ref.C
	b.View1 = make([]uint8, 0, it.batchSize*size)
	b.View2 = make([]uint8, 0, it.batchSize*size)
	for i, idx := range it.order[lo : lo+it.batchSize] {
		p := it.pairs[idx]
		b.View1 = append(b.View1, p.View1.Pix...)
		b.View2 = append(b.View2, p.View2.Pix...)
		b.Labels[i] = p.Label
	}
	return b, nil
}

func (it *memoryIterator) Close() error { return nil }
