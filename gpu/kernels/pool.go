package kernels

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// Pool runs parallel loops on a fixed set of worker goroutines: one pool per process (or per
// backend) keeps the number of busy goroutines at the number of cores instead of spawning one
// goroutine per tile. The goroutine that calls ParallelFor works too, so a pool of n threads has
// n-1 workers, and a call from inside a running task never deadlocks: helpers that have not
// started when the caller runs out of work are simply skipped.
type Pool struct {
	threads int
	kernel  *microKernel // the matrix multiply's micro-kernel
	// direct turns Winograd off for this pool (DirectConvolutions).
	direct bool
	jobs   chan *job
	sendMu sync.RWMutex // held for reading while sending jobs, for writing by Close
	closed bool         // guarded by sendMu
	wg     sync.WaitGroup
}

// DirectConvolutions makes p compute every convolution with the direct algorithm, never
// Winograd (whose transforms round differently): the GPU check's reference is the plainest
// float32 algorithm. Call it before the pool's first convolution.
func (p *Pool) DirectConvolutions() { p.direct = true }

// NewPool returns a pool that runs loops on threads goroutines; threads < 1 means
// runtime.GOMAXPROCS(0).
func NewPool(threads int) *Pool {
	if threads < 1 {
		threads = runtime.GOMAXPROCS(0)
	}
	p := &Pool{threads: threads, kernel: selectedKernel, jobs: make(chan *job, 4*threads)}
	for range threads - 1 {
		p.wg.Add(1)
		go p.work()
	}
	return p
}

// defaultPool serves the package-level functions (Sgemm): GOMAXPROCS threads, created on first use.
var defaultPool = sync.OnceValue(func() *Pool { return NewPool(0) })

// DefaultPool returns the pool the package-level functions use (runtime.GOMAXPROCS(0) threads at
// its creation).
func DefaultPool() *Pool { return defaultPool() }

// Threads is the number of goroutines that run a loop, the caller's included.
func (p *Pool) Threads() int { return p.threads }

// Close stops the workers once queued loops have finished. ParallelFor still works after Close,
// on the caller's goroutine alone.
func (p *Pool) Close() {
	p.sendMu.Lock()
	if p.closed {
		p.sendMu.Unlock()
		return
	}
	p.closed = true
	close(p.jobs)
	p.sendMu.Unlock()
	p.wg.Wait()
}

// job is one ParallelFor call: chunks are claimed with an atomic counter by the caller and by
// the helpers that joined before the caller finished.
type job struct {
	fn     func(chunk int)
	n      int64
	next   atomic.Int64
	mu     sync.Mutex
	cond   sync.Cond
	active int  // helpers running chunks, guarded by mu
	done   bool // the caller ran out of chunks: late helpers leave at once; guarded by mu
	panic  any  // first panic of a helper, re-raised on the caller; guarded by mu
}

func (j *job) runChunks() {
	for {
		c := j.next.Add(1) - 1
		if c >= j.n {
			return
		}
		j.fn(int(c))
	}
}

func (p *Pool) work() {
	defer p.wg.Done()
	for j := range p.jobs {
		j.mu.Lock()
		if j.done {
			j.mu.Unlock()
			continue
		}
		j.active++
		j.mu.Unlock()
		func() {
			defer func() {
				r := recover()
				j.mu.Lock()
				if r != nil && j.panic == nil {
					j.panic = r
					j.next.Store(j.n) // stop handing out chunks
				}
				j.active--
				if j.active == 0 {
					j.cond.Broadcast()
				}
				j.mu.Unlock()
			}()
			j.runChunks()
		}()
	}
}

// ParallelFor calls fn(chunk) for every chunk in [0, chunks), spread over the pool's threads,
// and returns when all calls have returned. Chunks are handed out in increasing order; fn must
// be safe to call concurrently for different chunks. A panic in fn is re-raised on the caller.
func (p *Pool) ParallelFor(chunks int, fn func(chunk int)) {
	if chunks <= 0 {
		return
	}
	if chunks == 1 || p.threads == 1 {
		for c := range chunks {
			fn(c)
		}
		return
	}
	j := &job{fn: fn, n: int64(chunks)}
	j.cond.L = &j.mu
	p.sendMu.RLock()
	if !p.closed {
		for range min(p.threads-1, chunks-1) {
			select {
			case p.jobs <- j:
			default: // every worker is busy: the caller does more itself
			}
		}
	}
	p.sendMu.RUnlock()
	j.runChunks()
	j.mu.Lock()
	j.done = true
	for j.active > 0 {
		j.cond.Wait()
	}
	r := j.panic
	j.mu.Unlock()
	if r != nil {
		panic(r)
	}
}

// ParallelRange splits [0, n) into about Threads() contiguous ranges of at least grain elements
// each and calls fn(lo, hi) on each, in parallel.
func (p *Pool) ParallelRange(n, grain int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	grain = max(grain, 1)
	parts := min(p.threads, (n+grain-1)/grain)
	if parts <= 1 {
		fn(0, n)
		return
	}
	p.ParallelFor(parts, func(c int) {
		lo, hi := c*n/parts, (c+1)*n/parts
		if lo < hi {
			fn(lo, hi)
		}
	})
}
