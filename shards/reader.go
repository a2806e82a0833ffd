package shards

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"sort"
	"sync"

	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/transforms"
	"github.com/dcl-beam/dcl-beam/transforms/augment"
)

// Defaults of ReaderOptions.
const (
	// DefaultWindow is the number of row groups the shuffled reader mixes at once. With the
	// writer's 4 MiB row groups a window holds about 70 MiB of encoded views (about 11,000
	// 32×32 raw pairs or 1,100 224 px JPEG pairs).
	DefaultWindow = 16
	// DefaultPrefetch is the number of decoded batches the reader keeps ready.
	DefaultPrefetch = 2
)

// ReaderOptions configure a Reader. The order of rows is a pure function of the manifest,
// Seed, Epoch and Window: a checkpoint that records (Seed, Epoch, position) and Window
// resumes exactly.
type ReaderOptions struct {
	BatchSize int
	Seed      uint64
	Epoch     int
	// Start is the position to begin at: the number of rows of the epoch's order already
	// consumed (Batch.End of the last batch the trainer finished).
	Start int64
	// KeepPartial also returns the last, short batch of the epoch; by default it is dropped,
	// as training wants full batches.
	KeepPartial bool
	// Window is the number of row groups shuffled together (default DefaultWindow).
	Window int
	// Prefetch is the number of decoded batches kept ready (default DefaultPrefetch).
	Prefetch int
	// Decoders is the number of goroutines decoding views (default GOMAXPROCS).
	Decoders int
}

// Batch is a batch of rows with their views decoded to uint8 HWC. The trainer converts the
// pixels to float32; Image gives one view as a transforms.Image without copying.
type Batch struct {
	Epoch int
	// Start is the epoch position of the first row; End() is the position to resume from
	// once this batch is done.
	Start   int64
	Len     int
	H, W, C int
	Views   int // 1 or 2
	Keys    []string
	Indices []int64 // source index of each row
	Labels  []int32 // -1 for unlabelled
	Passes  []int32
	View1   []uint8 // Len × H × W × C
	View2   []uint8 // Len × H × W × C; nil for single-view datasets
}

// End returns the position just after the batch's last row.
func (b *Batch) End() int64 { return b.Start + int64(b.Len) }

// Image returns view (1 or 2) of row i, sharing the batch's memory.
func (b *Batch) Image(view, i int) transforms.Image {
	n := b.H * b.W * b.C
	pix := b.View1
	if view == 2 {
		pix = b.View2
	}
	return transforms.Image{Pix: pix[i*n : (i+1)*n : (i+1)*n], H: b.H, W: b.W, C: b.C}
}

// Reader streams batches of a dataset directory (local or gs://) with bounded memory and
// read-ahead: a goroutine reads and decodes the next batches while the caller computes.
//
// On base shards (Config.Online) the reader makes the views itself: each row's image is
// decoded and its two views of epoch e are cut as preprocessing cuts those of pass e
// (augment.Augmenter.ViewInto with the dataset's seed, the row's key, e and the view), so
// epoch e's batches hold exactly the views a dataset of E > e stored passes holds in pass
// e, in the same order (the layouts agree: see Place). A sequential reader makes epoch 0's.
//
// The shuffled order (NewReader) of epoch e covers pass e mod E. It permutes the pass's row
// groups with a PRNG seeded by (Seed, e), cuts that list into windows of Window row groups,
// and permutes the rows inside each window with a PRNG seeded by (Seed, e, window). Reading
// whole row groups keeps Parquet access sequential (random row access would read a page per
// row); the price is that a batch draws from Window row groups rather than from the whole
// pass, which is why the writer's callers should put rows in shards in a random order
// (see Place). Memory is at most three windows of encoded rows (the one being batched, the
// next one ready and the one after it being read) plus Prefetch+2 decoded batches,
// independent of the dataset's size: about 200 MiB with the defaults and 4 MiB row groups.
type Reader struct {
	m      *Manifest
	dir    string
	opts   ReaderOptions
	pass   int
	plan   *plan
	cancel context.CancelFunc
	out    chan result
	free   chan *Batch
	wg     sync.WaitGroup
	files  *fileCache
	done   bool
	// makers make the views of base rows (Config.Online), one per decoding goroutine.
	makers []*viewMaker
}

type result struct {
	b   *Batch
	err error
}

// NewReader opens the dataset in dir for training: epoch opts.Epoch in the shuffled order,
// from position opts.Start.
func NewReader(ctx context.Context, dir string, opts ReaderOptions) (*Reader, error) {
	m, err := ReadManifest(ctx, dir)
	if err != nil {
		return nil, err
	}
	if opts.Epoch < 0 {
		return nil, fmt.Errorf("epoch %d: want at least 0", opts.Epoch)
	}
	if opts.Window <= 0 {
		opts.Window = DefaultWindow
	}
	pass := opts.Epoch % m.Config.Passes
	p := shuffledPlan(m, pass, opts.Seed, opts.Epoch, opts.Window)
	return start(ctx, dir, m, pass, p, opts)
}

// NewSequentialReader opens the dataset in dir for evaluation: every row of every shard in
// manifest order (pass, part, row), in batches of batchSize, the last one possibly short.
func NewSequentialReader(ctx context.Context, dir string, batchSize int) (*Reader, error) {
	m, err := ReadManifest(ctx, dir)
	if err != nil {
		return nil, err
	}
	return start(ctx, dir, m, -1, sequentialPlan(m), ReaderOptions{BatchSize: batchSize, KeepPartial: true})
}

func start(ctx context.Context, dir string, m *Manifest, pass int, p *plan, opts ReaderOptions) (*Reader, error) {
	if opts.BatchSize <= 0 {
		return nil, fmt.Errorf("batch size %d: want at least 1", opts.BatchSize)
	}
	if opts.Start < 0 || opts.Start > p.total {
		return nil, fmt.Errorf("start position %d outside the epoch's %d rows", opts.Start, p.total)
	}
	if opts.Prefetch <= 0 {
		opts.Prefetch = DefaultPrefetch
	}
	if opts.Decoders <= 0 {
		opts.Decoders = runtime.GOMAXPROCS(0)
	}
	r := &Reader{
		m: m, dir: dir, opts: opts, pass: pass, plan: p,
		out:   make(chan result, opts.Prefetch),
		free:  make(chan *Batch, opts.Prefetch+2),
		files: &fileCache{dir: dir, m: m, open: map[string]*shardFile{}},
	}
	if m.Config.Online {
		if err := r.startViews(); err != nil {
			return nil, fmt.Errorf("dataset %s: %w", dir, err)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	r.cancel = cancel
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer close(r.out)
		if err := r.produce(ctx); err != nil {
			select {
			case r.out <- result{err: err}:
			case <-ctx.Done():
			}
		}
	}()
	return r, nil
}

// startViews prepares the view makers of base shards.
func (r *Reader) startViews() error {
	cfg := &r.m.Config
	aug, err := cfg.AugmentConfig()
	if err != nil {
		return err
	}
	if aug.Eval || aug.Size != cfg.Height || aug.Size != cfg.Width {
		return fmt.Errorf("base shards whose augmentation (preset %s, size %d) does not make %dx%d view pairs", aug.Preset, aug.Size, cfg.Height, cfg.Width)
	}
	for range r.opts.Decoders {
		a, err := augment.New(aug)
		if err != nil {
			return err
		}
		r.makers = append(r.makers, &viewMaker{aug: a})
	}
	return nil
}

// Manifest returns the dataset's manifest.
func (r *Reader) Manifest() *Manifest { return r.m }

// Pass returns the pass this epoch reads (-1 for a sequential reader, which reads all).
func (r *Reader) Pass() int { return r.pass }

// Rows returns the number of rows in the epoch's order (the pass, or the whole dataset).
func (r *Reader) Rows() int64 { return r.plan.total }

// Batches returns the number of batches a reader started at position 0 returns.
func (r *Reader) Batches() int64 {
	n := r.plan.total / int64(r.opts.BatchSize)
	if r.opts.KeepPartial && r.plan.total%int64(r.opts.BatchSize) != 0 {
		n++
	}
	return n
}

// Next returns the next batch, or io.EOF at the end of the epoch. The batch stays valid
// until it is passed to Release (or forever, if it never is).
func (r *Reader) Next() (*Batch, error) {
	if r.done {
		return nil, io.EOF
	}
	res, ok := <-r.out
	if !ok {
		r.done = true
		return nil, io.EOF
	}
	if res.err != nil {
		r.done = true
		return nil, res.err
	}
	return res.b, nil
}

// Release hands a batch's buffers back for reuse. Optional; do not touch b afterwards.
func (r *Reader) Release(b *Batch) {
	select {
	case r.free <- b:
	default:
	}
}

// Close stops the read-ahead and closes the shards.
func (r *Reader) Close() error {
	r.cancel()
	for range r.out { // unblock the producer
	}
	r.wg.Wait()
	return r.files.closeAll()
}

// plan is the order of one epoch: row groups (units) in reading order, cut into windows
// whose rows are permuted with their own seed.
type plan struct {
	units   []unit
	windows []window
	total   int64
	shuffle bool
	seed    uint64
	epoch   int
}

type unit struct {
	shard string // relative path
	group int
	rows  int64
}

type window struct {
	first, count int   // units
	start        int64 // epoch position of the window's first row
	rows         int64
}

func shuffledPlan(m *Manifest, pass int, seed uint64, epoch, w int) *plan {
	var units []unit
	for _, s := range m.ShardsOfPass(pass) {
		for g, n := range s.RowGroups {
			units = append(units, unit{shard: s.Path, group: g, rows: n})
		}
	}
	rng := newStream(seed, epoch, 0)
	shuffle(rng, len(units), func(i, j int) { units[i], units[j] = units[j], units[i] })
	p := &plan{units: units, shuffle: true, seed: seed, epoch: epoch}
	p.cut(w)
	return p
}

func sequentialPlan(m *Manifest) *plan {
	var units []unit
	for _, s := range m.Shards {
		for g, n := range s.RowGroups {
			units = append(units, unit{shard: s.Path, group: g, rows: n})
		}
	}
	p := &plan{units: units}
	p.cut(1)
	return p
}

func (p *plan) cut(w int) {
	for first := 0; first < len(p.units); first += w {
		win := window{first: first, count: min(w, len(p.units)-first), start: p.total}
		for _, u := range p.units[first : first+win.count] {
			win.rows += u.rows
		}
		p.windows = append(p.windows, win)
		p.total += win.rows
	}
}

// windowAt returns the index of the window holding epoch position pos, or len(windows)
// when pos is the end of the epoch.
func (p *plan) windowAt(pos int64) int {
	return sort.Search(len(p.windows), func(k int) bool {
		return p.windows[k].start+p.windows[k].rows > pos
	})
}

// order returns the permutation of window k's rows: element i is the index, in the
// concatenated rows of the window's units, of the window's i-th row in epoch order.
func (p *plan) order(k int) []int32 {
	n := int(p.windows[k].rows)
	perm := make([]int32, n)
	for i := range perm {
		perm[i] = int32(i)
	}
	if p.shuffle {
		rng := newStream(p.seed, p.epoch, k+1)
		shuffle(rng, n, func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
	}
	return perm
}

// newStream returns the PRNG for one purpose (stream 0: row groups; k+1: window k) of one
// epoch. PCG's output is fixed by its definition, and shuffle and bounded below are this
// package's own, so an order never changes with the Go version.
func newStream(seed uint64, epoch, stream int) *rand.PCG {
	return rand.NewPCG(seed, splitmix(uint64(epoch)<<32^uint64(stream)))
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// shuffle is Fisher–Yates with Lemire's unbiased bounded draws.
func shuffle(r *rand.PCG, n int, swap func(i, j int)) {
	for i := n - 1; i > 0; i-- {
		swap(i, int(bounded(r, uint64(i+1))))
	}
}

func bounded(r *rand.PCG, n uint64) uint64 {
	hi, lo := bits.Mul64(r.Uint64(), n)
	if lo < n {
		thresh := -n % n
		for lo < thresh {
			hi, lo = bits.Mul64(r.Uint64(), n)
		}
	}
	return hi
}

// loadedWindow is one window's rows, read and permuted.
type loadedWindow struct {
	k     int
	rows  []Row
	order []int32
	err   error
}

// produce runs in the reader's goroutine: a loader reads windows one ahead, and the batches
// are assembled and decoded here.
func (r *Reader) produce(ctx context.Context) error {
	p := r.plan
	first := p.windowAt(r.opts.Start)
	windows := make(chan loadedWindow) // unbuffered: at most one window waits, one loads
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer close(windows)
		for k := first; k < len(p.windows); k++ {
			lw := loadedWindow{k: k}
			lw.rows, lw.err = r.loadWindow(ctx, k)
			if lw.err == nil {
				lw.order = p.order(k)
			}
			select {
			case windows <- lw:
			case <-ctx.Done():
				return
			}
			if lw.err != nil {
				return
			}
		}
	}()

	pos := r.opts.Start
	B := r.opts.BatchSize
	pending := make([]*Row, 0, B)
	batchStart := pos
	for lw := range windows {
		if lw.err != nil {
			return lw.err
		}
		win := p.windows[lw.k]
		for i := pos - win.start; i < win.rows; i++ {
			pending = append(pending, &lw.rows[lw.order[i]])
			pos++
			if len(pending) == B {
				if err := r.emit(ctx, pending, batchStart); err != nil {
					return err
				}
				pending, batchStart = pending[:0], pos
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(pending) > 0 && r.opts.KeepPartial {
		return r.emit(ctx, pending, batchStart)
	}
	return nil
}

func (r *Reader) loadWindow(ctx context.Context, k int) ([]Row, error) {
	win := r.plan.windows[k]
	units := r.plan.units[win.first : win.first+win.count]
	parts := make([][]Row, len(units))
	errs := make([]error, len(units))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4) // a few row groups in flight hide GCS latency
	for i, u := range units {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if ctx.Err() != nil {
				errs[i] = ctx.Err()
				return
			}
			sf, err := r.files.get(ctx, u.shard)
			if err != nil {
				errs[i] = err
				return
			}
			parts[i], errs[i] = sf.readRowGroup(u.group, nil)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	rows := make([]Row, 0, win.rows)
	for _, part := range parts {
		rows = append(rows, part...)
	}
	if int64(len(rows)) != win.rows {
		return nil, fmt.Errorf("window %d: read %d rows, the manifest promises %d", k, len(rows), win.rows)
	}
	return rows, nil
}

func (r *Reader) emit(ctx context.Context, rows []*Row, start int64) error {
	b, err := r.decode(rows, start)
	if err != nil {
		return err
	}
	select {
	case r.out <- result{b: b}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *Reader) decode(rows []*Row, start int64) (*Batch, error) {
	cfg := &r.m.Config
	n := len(rows)
	var b *Batch
	select {
	case b = <-r.free:
	default:
		b = &Batch{}
	}
	size := cfg.Height * cfg.Width * cfg.Channels
	*b = Batch{
		Epoch: r.opts.Epoch, Start: start, Len: n, H: cfg.Height, W: cfg.Width, C: cfg.Channels, Views: cfg.Views,
		Keys: resize(b.Keys, n), Indices: resize(b.Indices, n), Labels: resize(b.Labels, n), Passes: resize(b.Passes, n),
		View1: resize(b.View1, n*size),
	}
	if cfg.Views == 2 {
		b.View2 = resize(b.View2, n*size)
	}
	d := min(r.opts.Decoders, n)
	errs := make([]error, d)
	var wg sync.WaitGroup
	for w := range d {
		wg.Go(func() {
			var img transforms.Image
			for i := w * n / d; i < (w+1)*n/d; i++ {
				row := rows[i]
				b.Keys[i], b.Indices[i], b.Labels[i], b.Passes[i] = row.Key, row.Index, row.Label, row.Pass
				if cfg.Online {
					b.Passes[i] = int32(r.opts.Epoch)
					if err := cfg.checkRow(row); err != nil {
						errs[w] = fmt.Errorf("%s: %w", r.dir, err)
						return
					}
					if err := r.makers[w].views(cfg, row, r.opts.Epoch, b.View1[i*size:(i+1)*size:(i+1)*size], b.View2[i*size:(i+1)*size:(i+1)*size]); err != nil {
						errs[w] = fmt.Errorf("row %q of %s: %w", row.Key, r.dir, err)
						return
					}
					continue
				}
				for v, data := range [][]byte{row.View1, row.View2}[:cfg.Views] {
					if int(row.Height) != cfg.Height || int(row.Width) != cfg.Width || int(row.Channels) != cfg.Channels {
						errs[w] = fmt.Errorf("row %q of %s: size %dx%dx%d, the dataset's is %dx%dx%d", row.Key, r.dir, row.Height, row.Width, row.Channels, cfg.Height, cfg.Width, cfg.Channels)
						return
					}
					dst := b.View1
					if v == 1 {
						dst = b.View2
					}
					img.Pix = dst[i*size : (i+1)*size : (i+1)*size]
					if err := DecodeView(data, Encoding(row.Encoding), cfg.Height, cfg.Width, cfg.Channels, &img); err != nil {
						errs[w] = fmt.Errorf("row %q of %s, view %d: %w", row.Key, r.dir, v+1, err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return b, nil
}

func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// fileCache keeps the shards a reader has opened, checking each footer once against the
// manifest: the reader's arithmetic relies on the row groups the manifest lists.
type fileCache struct {
	mu   sync.Mutex
	dir  string
	m    *Manifest
	open map[string]*shardFile
}

func (c *fileCache) get(ctx context.Context, rel string) (*shardFile, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if sf, ok := c.open[rel]; ok {
		return sf, nil
	}
	sf, err := openShardFile(ctx, storage.Join(c.dir, rel))
	if err != nil {
		return nil, err
	}
	var want ShardInfo
	for _, s := range c.m.Shards {
		if s.Path == rel {
			want = s
		}
	}
	var problem string
	switch got := sf.rowGroupSizes(); {
	case sf.file.Size() != want.Bytes:
		problem = fmt.Sprintf("%d bytes, the manifest says %d", sf.file.Size(), want.Bytes)
	case len(sf.config.Diff(c.m.Config)) > 0:
		problem = fmt.Sprintf("its footer's provenance differs from the manifest: %v", sf.config.Diff(c.m.Config))
	case len(got) != len(want.RowGroups):
		problem = fmt.Sprintf("%d row groups, the manifest says %d", len(got), len(want.RowGroups))
	default:
		for i := range got {
			if got[i] != want.RowGroups[i] {
				problem = fmt.Sprintf("row group %d has %d rows, the manifest says %d", i, got[i], want.RowGroups[i])
				break
			}
		}
	}
	if problem != "" {
		sf.Close()
		return nil, fmt.Errorf("shard %s does not match %s: %s (run dcl shards verify)", storage.Join(c.dir, rel), ManifestName, problem)
	}
	c.open[rel] = sf
	return sf, nil
}

func (c *fileCache) closeAll() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for k, sf := range c.open {
		errs = append(errs, sf.Close())
		delete(c.open, k)
	}
	return errors.Join(errs...)
}
