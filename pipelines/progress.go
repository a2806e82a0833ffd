package pipelines

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
)

// Progress counts what a pipeline's DoFns have done while it runs: records read and rows
// written (or found unusable). Beam has no channel from a running DoFn back to the program
// that launched it, and runners report metrics only when the job ends; but when the DoFns
// run in the launching process (prism in process, the direct runner, a job server with
// LOOPBACK workers), they can find a Progress by its id in a process-wide registry. That
// registry is the one mutable global of this package, and the only way to show progress
// that is true: on workers in other processes (Dataflow, PROCESS or DOCKER environments)
// the lookup finds nothing and the counts stay at zero.
type Progress struct {
	key     string
	read    atomic.Int64
	written atomic.Int64
}

var (
	progressMu   sync.Mutex
	progressByID = map[string]*Progress{}
	progressSeq  atomic.Int64
)

// NewProgress registers a Progress for a pipeline about to run in this process; Close it
// when the run ends.
func NewProgress() *Progress {
	p := &Progress{key: fmt.Sprintf("%d-%d", os.Getpid(), progressSeq.Add(1))}
	progressMu.Lock()
	progressByID[p.key] = p
	progressMu.Unlock()
	return p
}

// Close unregisters p.
func (p *Progress) Close() {
	if p == nil {
		return
	}
	progressMu.Lock()
	delete(progressByID, p.key)
	progressMu.Unlock()
}

// Read returns the records read so far (rows of no pass yet).
func (p *Progress) Read() int64 {
	if p == nil {
		return 0
	}
	return p.read.Load()
}

// Written returns the rows written so far, counting records that turned out unusable.
func (p *Progress) Written() int64 {
	if p == nil {
		return 0
	}
	return p.written.Load()
}

func (p *Progress) id() string {
	if p == nil {
		return ""
	}
	return p.key
}

func (p *Progress) addRead(n int64) {
	if p != nil {
		p.read.Add(n)
	}
}

func (p *Progress) addWritten(n int64) {
	if p != nil {
		p.written.Add(n)
	}
}

// lookupProgress finds the Progress a DoFn reports to; nil (counting nothing) when the
// pipeline was launched by another process or without one.
func lookupProgress(id string) *Progress {
	if id == "" {
		return nil
	}
	progressMu.Lock()
	defer progressMu.Unlock()
	return progressByID[id]
}
