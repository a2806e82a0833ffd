package pipelines

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"

	"github.com/dcl-beam/dcl-beam/shards"
	"github.com/dcl-beam/dcl-beam/transforms"
	"github.com/dcl-beam/dcl-beam/transforms/augment"
	"github.com/dcl-beam/dcl-beam/transforms/datasets"
)

func init() {
	registerElement[shards.ShardInfo]()
	register.DoFn5x1[context.Context, int, func(*refBatch) bool, func(shards.ShardInfo), func(shards.DeadLetter), error](&writePartFn{})
	register.Emitter1[shards.ShardInfo]()
	register.Iter1[refBatch]()
}

var (
	recordsFetched = beam.NewCounter(MetricsNamespace, MetricRecordsFetched)
	rowsWritten    = beam.NewCounter(MetricsNamespace, MetricRowsWritten)
	viewsWritten   = beam.NewCounter(MetricsNamespace, MetricViewsWritten)
	bytesWritten   = beam.NewCounter(MetricsNamespace, MetricBytesWritten)
	shardsWritten  = beam.NewCounter(MetricsNamespace, MetricShardsWritten)
)

// Re-reading records that lie side by side in large files (datasets.Unit.RecordBytes): the
// references of a window of rows (in row order) are fetched together, which their kind does
// by ranges of the files, and the window's records are held until its rows are written.
// Other records (image files, tar members) are fetched one by one as their rows are made.
const (
	// fetchWindowBytes bounds the source bytes held for one window. Every window reads
	// the ranges of the files its records lie in, so larger windows read less twice: a
	// CIFAR-10 shard of 25,000 records fits in one.
	fetchWindowBytes = 128 << 20
	// batchRows is how many rows are made in parallel, then written in order.
	batchRows = 256
	// maxOpenFiles bounds the files (tars) a shard's fetcher keeps open for ranged reads.
	maxOpenFiles = 64
)

// writePartFn writes one shard per element: the references grouped under the shard's key,
// sorted into row order, each record read again from the source, decoded, augmented and
// encoded, and the rows written with shards.NewWriter, which commits the file atomically on
// Close. It emits the shard's ShardInfo and, in pass 0, a dead letter for each record that does not decode; later passes skip those records too, so every pass has the
// same rows. Its output is a pure function of its input, so a retried bundle rewrites the
// same bytes.
type writePartFn struct {
	Output     string
	Units      []datasets.Unit
	ProgressID string
	// FailAfterRows, when positive, makes the DoFn fail once a shard has that many rows:
	// the tests' stand-in for a worker that dies part-way through a shard.
	FailAfterRows int

	progress *Progress
	fetcher  *datasets.Fetcher
	makers   []*rowMaker
}

func (f *writePartFn) Setup() { f.progress = lookupProgress(f.ProgressID) }

func (f *writePartFn) Teardown() error { return f.fetcher.Close() }

func (f *writePartFn) ProcessElement(ctx context.Context, shard int, batches func(*refBatch) bool,
	emitInfo func(shards.ShardInfo), emitDead func(shards.DeadLetter)) error {
	var refs []ref
	var configs []*shards.Config
	var b refBatch
	for batches(&b) {
		for _, u := range b.Unit {
			if u < 0 || int(u) >= len(f.Units) {
				return fmt.Errorf("shard number %d: a reference to unit %d, the plan has %d", shard, u, len(f.Units))
			}
		}
		var err error
		if refs, err = b.appendRefs(refs); err != nil {
			return fmt.Errorf("shard number %d: %w", shard, err)
		}
		if b.Config != nil {
			configs = append(configs, b.Config)
		}
	}
	if len(configs) != 1 {
		return fmt.Errorf("shard number %d: got the shards' configuration %d times, want once", shard, len(configs))
	}
	cfg := *configs[0]
	var aug augment.Config
	if err := json.Unmarshal(cfg.Augment, &aug); err != nil {
		return fmt.Errorf("decoding the augmentation configuration: %w", err)
	}
	if shard < 0 || shard >= cfg.Passes*cfg.Parts {
		return fmt.Errorf("shard number %d outside 0..%d", shard, cfg.Passes*cfg.Parts-1)
	}
	id := shards.ShardID{Pass: shard / cfg.Parts, Part: shard % cfg.Parts, Parts: cfg.Parts}
	slices.SortFunc(refs, func(a, b ref) int { return cmp.Or(cmp.Compare(a.Order, b.Order), cmp.Compare(a.Index, b.Index)) })

	if err := f.ensureMakers(&cfg, aug); err != nil {
		return err
	}
	// The files (tars) this shard reads records of stay open while it is written.
	f.fetcher = datasets.NewFetcher(f.Units)
	defer f.fetcher.Close()
	w, err := shards.NewWriter(ctx, f.Output, id, cfg, shards.WriterOptions{})
	if err != nil {
		return err
	}
	defer w.Abort()
	part := &partWriter{fn: f, ctx: ctx, cfg: &cfg, pass: id.Pass, w: w, emitDead: emitDead}
	for start := 0; start < len(refs); {
		end := start + f.window(refs[start])
		end = min(end, len(refs))
		if err := part.writeWindow(refs[start:end]); err != nil {
			return fmt.Errorf("shard %s: %w", id.Path(), err)
		}
		start = end
	}
	info, err := w.Close()
	if err != nil {
		return fmt.Errorf("shard %s: %w", id.Path(), err)
	}
	bytesWritten.Inc(ctx, info.Bytes)
	shardsWritten.Inc(ctx, 1)
	emitInfo(info)
	return nil
}

// ensureMakers gives the DoFn one rowMaker per core for the shard's configuration.
func (f *writePartFn) ensureMakers(cfg *shards.Config, aug augment.Config) error {
	n := runtime.GOMAXPROCS(0)
	if len(f.makers) != n || f.makers[0].aug.Config() != aug {
		f.makers = f.makers[:0]
		for range n {
			a, err := augment.New(aug)
			if err != nil {
				return err
			}
			f.makers = append(f.makers, &rowMaker{aug: a})
		}
	}
	for _, m := range f.makers {
		b, err := shards.NewBaseMaker(cfg)
		if err != nil {
			return err
		}
		m.base = b
	}
	return nil
}

// window is how many rows, starting with r, are fetched together.
func (f *writePartFn) window(r ref) int {
	if n := f.Units[r.Unit].RecordBytes; n > 0 {
		return max(batchRows, int(fetchWindowBytes/n))
	}
	return batchRows
}

// source is a record ready to augment: decoded pixels, or an image file's bytes.
type source struct {
	key     string
	index   int64
	label   int
	img     transforms.Image
	encoded []byte
	limits  datasets.Limits
}

// partWriter writes the rows of one shard.
type partWriter struct {
	fn       *writePartFn
	ctx      context.Context
	cfg      *shards.Config
	pass     int
	w        *shards.Writer
	emitDead func(shards.DeadLetter)
	written  int
}

// fetchWindows bounds the windows of records fetched together that this process holds at
// once. Runners run many shards' bundles at once (prism one per shard: eight at once were
// seen on two cores), and each window holds up to fetchWindowBytes of pixels; this keeps a
// process's memory bounded whatever the runner does, while enough windows are in flight to
// keep every core busy. It is process state on purpose, like a connection pool.
var fetchWindows = make(chan struct{}, max(2, runtime.GOMAXPROCS(0)/4))

// writeWindow fetches a window of references and writes their rows, batch by batch.
func (p *partWriter) writeWindow(refs []ref) error {
	var fetched []datasets.Record
	if p.fn.Units[refs[0].Unit].RecordBytes > 0 {
		select {
		case fetchWindows <- struct{}{}:
		case <-p.ctx.Done():
			return p.ctx.Err()
		}
		defer func() { <-fetchWindows }()
		var err error
		if fetched, err = p.fetch(refs); err != nil {
			return err
		}
		recordsFetched.Inc(p.ctx, int64(len(fetched)))
	}
	for start := 0; start < len(refs); start += batchRows {
		end := min(start+batchRows, len(refs))
		var batch []datasets.Record
		if fetched != nil {
			batch = fetched[start:end]
		}
		if err := p.writeBatch(refs[start:end], batch); err != nil {
			return err
		}
		clear(batch) // let the pixels go
		if p.fn.fetcher.OpenFiles() > maxOpenFiles {
			if err := p.fn.fetcher.Close(); err != nil {
				return err
			}
		}
	}
	return nil
}

// fetch reads the records of refs again, in their order, and checks that each is the one
// ReadUnits read.
func (p *partWriter) fetch(refs []ref) ([]datasets.Record, error) {
	frefs := make([]datasets.Ref, len(refs))
	for i, r := range refs {
		frefs[i] = r.fetchRef()
	}
	out := make([]datasets.Record, len(refs))
	found := make([]bool, len(refs))
	err := p.fn.fetcher.Fetch(p.ctx, frefs, func(i int, rec datasets.Record) error {
		if recordCRC(&rec) != refs[i].CRC {
			return changedError(rec.Source, rec.Key)
		}
		out[i], found[i] = rec, true
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i, ok := range found {
		if !ok {
			return nil, fmt.Errorf("record with index %d: readable when the pipeline first read it, not now: the input changed during the run", refs[i].Index)
		}
	}
	return out, nil
}

// made is one row, or the dead letter of a record that gave none.
type made struct {
	row  shards.Row
	dead *shards.DeadLetter
	err  error
}

// writeBatch makes a batch's rows in parallel, one rowMaker per goroutine, and writes them
// in order. fetched holds the batch's records when its window fetched them, else nil.
func (p *partWriter) writeBatch(refs []ref, fetched []datasets.Record) error {
	out := make([]made, len(refs))
	var next atomic.Int64
	var wg sync.WaitGroup
	for _, m := range p.fn.makers[:min(len(p.fn.makers), len(refs))] {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(refs) || p.ctx.Err() != nil {
					return
				}
				var rec *datasets.Record
				if fetched != nil {
					rec = &fetched[i]
				}
				out[i] = p.make(m, refs[i], rec)
				if out[i].err != nil {
					next.Store(int64(len(refs))) // stop the others early
					return
				}
			}
		})
	}
	wg.Wait()
	if err := p.ctx.Err(); err != nil {
		return err
	}
	for i := range out {
		if out[i].err != nil {
			return out[i].err
		}
	}
	if fetched == nil {
		// Beam's counters may be updated only from the DoFn's own goroutine.
		recordsFetched.Inc(p.ctx, int64(len(refs)))
	}
	var rows, dead int64
	for i := range out {
		o := &out[i]
		switch {
		case o.dead != nil:
			dead++
			if p.pass == 0 {
				p.emitDead(*o.dead)
				deadLetters.Inc(p.ctx, 1)
			}
		default:
			if err := p.w.Write(o.row); err != nil {
				return err
			}
			rows++
			if p.written++; p.fn.FailAfterRows > 0 && p.written >= p.fn.FailAfterRows {
				return fmt.Errorf("failing after %d rows, as the test asked", p.written)
			}
		}
	}
	rowsWritten.Inc(p.ctx, rows)
	viewsWritten.Inc(p.ctx, rows*int64(p.cfg.Views))
	p.fn.progress.addWritten(rows + dead)
	return nil
}

// make fetches (unless its window did), decodes and augments one record.
func (p *partWriter) make(m *rowMaker, r ref, rec *datasets.Record) made {
	if rec == nil {
		fetched, err := p.fetch([]ref{r})
		if err != nil {
			return made{err: err}
		}
		rec = &fetched[0]
	}
	u := &p.fn.Units[r.Unit]
	src := source{key: rec.Key, index: rec.Index, label: rec.Label, img: rec.Pixels, encoded: rec.Encoded, limits: u.Limits}
	row, err := m.row(p.cfg, p.pass, src)
	var bad *badImage
	if errors.As(err, &bad) {
		return made{dead: &shards.DeadLetter{Source: rec.Source, Position: rec.Offset, Key: rec.Key, Reason: bad.err.Error()}}
	}
	if err != nil {
		return made{err: err}
	}
	return made{row: row}
}

// badImage is an image file that does not decode: a dead letter, not a failure.
type badImage struct{ err error }

func (b *badImage) Error() string { return b.err.Error() }

// rowMaker turns a source image into a row: its base image (shards.BaseMaker: the image every
// view is cut from, the same in base shards and in stored passes), and either the stored
// base (base shards) or the views and their encoding.
type rowMaker struct {
	aug          *augment.Augmenter
	base         *shards.BaseMaker
	view         transforms.Image
	dst, scratch transforms.Image
}

// baseOf returns the image src's views are cut from and how base shards store it. Published
// files that are their own base (shards.Config.KeepsFile) are decoded from their bytes as a
// reader of base shards decodes them; shrunk images stored lossily (JPEG) are decoded from
// the stored bytes, so that the views of both kinds of dataset come from the same pixels.
//
// A decoded source image counts in the process's decode budget (datasets.DecodeHeld) until
// release, always non-nil, is called: once its row is made.
func (m *rowMaker) baseOf(cfg *shards.Config, src source) (img transforms.Image, enc shards.Encoding, stored []byte, release func(), err error) {
	release = func() {}
	if src.encoded != nil {
		h, err := datasets.DecodeHeader(src.encoded, "", src.limits)
		if err != nil {
			return img, "", nil, release, &badImage{err}
		}
		if cfg.KeepsFile(h.Format, h.Height, h.Width) {
			enc = shards.Encoding(h.Format)
			img, err = shards.DecodeBase(src.encoded, enc, h.Height, h.Width, cfg.Channels, &m.dst, &m.scratch)
			if err != nil {
				return img, "", nil, release, &badImage{err}
			}
			return img, enc, src.encoded, release, nil
		}
		if src.img, release, err = datasets.DecodeHeld(src.encoded, "", src.limits); err != nil {
			return img, "", nil, release, &badImage{err}
		}
	}
	img, shrunk, err := m.base.Shrink(toChannels(src.img, cfg.Channels))
	if err != nil {
		return img, "", nil, release, fmt.Errorf("record %s: %w", src.key, err)
	}
	if !cfg.Online && !(shrunk && cfg.Encoding == shards.JPEG) {
		return img, shards.Raw, nil, release, nil // views are cut from the pixels themselves
	}
	if enc, stored, err = m.base.Encode(img, shrunk); err != nil {
		return img, "", nil, release, fmt.Errorf("record %s: %w", src.key, err)
	}
	if enc == shards.JPEG { // lossy: cut the views from what a reader will decode
		if img, err = shards.DecodeBase(stored, enc, img.H, img.W, cfg.Channels, &m.dst, &m.scratch); err != nil {
			return img, "", nil, release, fmt.Errorf("record %s: %w", src.key, err)
		}
	}
	return img, enc, stored, release, nil
}

func (m *rowMaker) row(cfg *shards.Config, pass int, src source) (shards.Row, error) {
	img, enc, stored, release, err := m.baseOf(cfg, src)
	defer release()
	if err != nil {
		return shards.Row{}, err
	}
	row := shards.Row{Key: src.key, Index: src.index, Label: int32(src.label), Pass: int32(pass),
		Height: int32(cfg.Height), Width: int32(cfg.Width), Channels: int32(cfg.Channels), Encoding: string(cfg.Encoding)}
	if cfg.Online {
		row.View1, row.Height, row.Width, row.Encoding = stored, int32(img.H), int32(img.W), string(enc)
		return row, nil
	}
	for v := range cfg.Views {
		if err := m.aug.ViewInto(&m.view, img, cfg.Seed, src.key, pass, v); err != nil {
			return row, err
		}
		enc, err := shards.EncodeView(m.view, cfg.Encoding)
		if err != nil {
			return row, fmt.Errorf("record %s view %d: %w", src.key, v, err)
		}
		if v == 0 {
			row.View1 = enc
		} else {
			row.View2 = enc
		}
	}
	return row, nil
}

func changedError(source, key string) error {
	return fmt.Errorf("%s: record %s is not what the pipeline read from it a moment ago: the input changed during the run; run again on an input that does not change", source, key)
}

// toChannels converts an image to c channels (transforms.ToChannels).
func toChannels(m transforms.Image, c int) transforms.Image { return transforms.ToChannels(m, c) }
