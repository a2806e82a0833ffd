package cpu

import (
	"errors"
	"slices"
	"sync"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
)

// bufferPool keeps the large buffers that executions release, by shape, for the next operation
// that needs one of that shape, in the same execution or a later one.
//
// The pure-Go backend's own pools are sync.Pools, which the garbage collector empties: a training step then
// allocates its activations afresh each time, the released ones become garbage, and the heap
// grows to twice what the step holds before a collection. Buffers kept here stay until reused;
// in a loop of training steps, after the first, the large tensors are all recycled and the heap
// stays near what one step holds at its peak.
//
// Buffers are matched by exact shape (a pure-Go backend buffer's shape is fixed), so a step keeps more
// than its planned peak (livePeak) of held values: per shape, the most it holds at once. What
// the pool keeps is bounded by 1.5 times the largest planned peak among the executables not yet
// finalized, and a buffer two executions in a row did not take goes back to the pure-Go backend's pools,
// as do the oldest ones beyond the bound.
type bufferPool struct {
	minBytes int64 // buffers smaller than this are not kept (0: poolMinBytes)
	mu       sync.Mutex
	free     map[poolKey][]pooled
	held     map[compute.Buffer]bool // the buffers in free, to refuse one released twice
	bytes    int64                   // the total size of the buffers in free
	seq      uint64                  // release counter, for returning the oldest first
	epoch    uint64                  // executions finished
	limits   map[*Executable]int64   // planned peaks of the executables alive
	stats    PoolStats
}

// poolMinBytes is the size under which buffers go straight to the pure-Go backend's pools: small tensors
// cost little garbage, and keeping them would only fragment the pool.
const poolMinBytes = 64 << 10

// poolKey is a buffer's shape, as a comparable value.
type poolKey struct {
	dtype dtypes.DType
	rank  int
	dims  [8]int
}

type pooled struct {
	buf   compute.Buffer
	seq   uint64
	epoch uint64 // executions finished when it was released
	bytes int64
}

// PoolStats counts what the backend's buffer pool did: large buffers handed out from it (Hits)
// or newly allocated (Misses), with their sizes in bytes, and what it holds now.
type PoolStats struct {
	Hits, Misses           int64
	HitBytes, MissBytes    int64
	HeldBuffers, HeldBytes int64
}

func (p *bufferPool) keyOf(s shapes.Shape) (poolKey, bool) {
	minBytes := p.minBytes
	if minBytes == 0 {
		minBytes = poolMinBytes
	}
	if s.Rank() > 8 || int64(s.ByteSize()) < minBytes {
		return poolKey{}, false
	}
	k := poolKey{dtype: s.DType, rank: s.Rank()}
	copy(k.dims[:], s.Dimensions)
	return k, true
}

// get returns a kept buffer of the shape (its contents are stale), or nil.
func (p *bufferPool) get(s shapes.Shape) compute.Buffer {
	k, ok := p.keyOf(s)
	if !ok {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	list := p.free[k]
	if len(list) == 0 {
		p.stats.Misses++
		p.stats.MissBytes += int64(s.ByteSize())
		return nil
	}
	e := list[len(list)-1] // the most recently released: likely still in cache
	p.free[k] = list[:len(list)-1]
	delete(p.held, e.buf)
	p.bytes -= e.bytes
	p.stats.Hits++
	p.stats.HitBytes += e.bytes
	return e.buf
}

// errReleasedTwice is returned for a buffer released while the pool holds it already.
var errReleasedTwice = errors.New("buffer released twice")

// put keeps buf (of shape s) if it is large enough; it returns whether it did, and the buffers
// to hand back to the pure-Go backend because the pool is over its limit.
func (p *bufferPool) put(buf compute.Buffer, s shapes.Shape) (kept bool, evicted []compute.Buffer, err error) {
	k, ok := p.keyOf(s)
	if !ok {
		return false, nil, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held[buf] {
		return false, nil, errReleasedTwice
	}
	if p.free == nil {
		p.free = make(map[poolKey][]pooled)
		p.held = make(map[compute.Buffer]bool)
	}
	p.seq++
	e := pooled{buf: buf, seq: p.seq, epoch: p.epoch, bytes: int64(s.ByteSize())}
	p.free[k] = append(p.free[k], e)
	p.held[buf] = true
	p.bytes += e.bytes
	return true, p.trim(), nil
}

// poolMaxIdle is how many large executions a kept buffer may wait unused before it goes back
// to the pure-Go backend: one that two in a row did not need (a shape that only the pure-Go backend's operations
// make, say) is not coming back.
const poolMaxIdle = 2

// advance counts a finished execution of an executable with planned peak peak, and returns the
// buffers that have waited too long. Only executions of the largest executables count: small
// graphs run between two training steps must not age the step's buffers.
func (p *bufferPool) advance(peak int64) []compute.Buffer {
	p.mu.Lock()
	defer p.mu.Unlock()
	if 2*peak < p.maxPeak() {
		return nil
	}
	p.epoch++
	var out []compute.Buffer
	for k, list := range p.free {
		stale := 0
		for stale < len(list) && p.epoch-list[stale].epoch > poolMaxIdle {
			stale++
		}
		for _, e := range list[:stale] {
			delete(p.held, e.buf)
			p.bytes -= e.bytes
			out = append(out, e.buf)
		}
		if stale == len(list) {
			delete(p.free, k)
		} else if stale > 0 {
			p.free[k] = slices.Delete(list, 0, stale)
		}
	}
	return out
}

// maxPeak is the largest planned peak among the executables alive.
func (p *bufferPool) maxPeak() int64 {
	var l int64
	for _, peak := range p.limits {
		l = max(l, peak)
	}
	return l
}

// limit is what the pool may keep: 1.5 times the largest planned peak.
func (p *bufferPool) limit() int64 {
	l := p.maxPeak()
	return l + l/2
}

// trim removes the buffers released longest ago until the pool is within its limit, and
// returns them.
func (p *bufferPool) trim() []compute.Buffer {
	limit := p.limit()
	var out []compute.Buffer
	for p.bytes > limit {
		var oldest poolKey
		found := false
		for k, list := range p.free {
			if len(list) > 0 && (!found || list[0].seq < p.free[oldest][0].seq) {
				oldest, found = k, true
			}
		}
		if !found {
			break
		}
		e := p.free[oldest][0]
		p.free[oldest] = slices.Delete(p.free[oldest], 0, 1)
		if len(p.free[oldest]) == 0 {
			delete(p.free, oldest)
		}
		delete(p.held, e.buf)
		p.bytes -= e.bytes
		out = append(out, e.buf)
	}
	return out
}

// setLimit records (peak > 0) or forgets (peak 0) an executable's planned peak, and returns the
// buffers that no longer fit.
func (p *bufferPool) setLimit(e *Executable, peak int64) []compute.Buffer {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.limits == nil {
		p.limits = make(map[*Executable]int64)
	}
	if peak > 0 {
		p.limits[e] = peak
		return nil
	}
	delete(p.limits, e)
	return p.trim()
}

// drain empties the pool and returns what it held.
func (p *bufferPool) drain() []compute.Buffer {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []compute.Buffer
	for _, list := range p.free {
		for _, e := range list {
			out = append(out, e.buf)
		}
	}
	p.free, p.held, p.bytes = nil, nil, 0
	return out
}

func (p *bufferPool) snapshot() PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.HeldBytes = p.bytes
	s.HeldBuffers = int64(len(p.held))
	return s
}
