package pipelines

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/options/jobopts"

	"github.com/dcl-beam/dcl-beam/internal/progress"
)

// Progress counts what a pipeline's DoFns have done while it runs: records read and rows
// written (or found unusable) by preprocess, units of work done by the evaluations. Beam has no channel from a running DoFn back to the program
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
	done    atomic.Int64 // the evaluations' unit of work (rows embedded, queries searched…)
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

// Done returns the units of work done so far (the evaluation pipelines').
func (p *Progress) Done() int64 {
	if p == nil {
		return 0
	}
	return p.done.Load()
}

func (p *Progress) addDone(n int64) {
	if p != nil {
		p.done.Add(n)
	}
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

// workersHere reports that the selected runner runs the pipeline's DoFns in this process
// (prism without a job server of its own, the direct runner, LOOPBACK workers), where they
// can reach a Progress; a job only submitted or translated runs nothing here.
func workersHere() bool {
	if submitOnly() {
		return false
	}
	name := RunnerName()
	spec, ok := runnerRegistry.Lookup(name)
	switch {
	case !ok:
		return jobopts.IsLoopback()
	case spec.remoteWorkers:
		return false
	}
	// In this process unless a job server runs the job, whose workers are here only as
	// LOOPBACK ones.
	return !usesJobServer(name) || jobopts.IsLoopback()
}

// watch shows on display, while a pipeline runs, the units of work (Progress.Done) that its
// DoFns count, out of total. Where they run in other processes the count would stay at 0,
// so nothing is shown rather than a count that lies; the Progress is then nil, which counts
// nothing. end stops the display, complete when the job succeeded.
//
// waiting, when set, is shown until the first unit is done (progress.Reporter.Waiting).
func watch(display progress.Options, name string, total int64, unit, waiting string) (p *Progress, end func(ok bool)) {
	if display.Mode == progress.Off || !workersHere() {
		return nil, func(bool) {}
	}
	p = NewProgress()
	r := display.Start(name, 0, total, unit)
	r.Follow(p.Done)
	r.Waiting(waiting)
	return p, func(ok bool) {
		if ok {
			r.Finish()
		} else {
			r.End()
		}
		p.Close()
	}
}

// watchPreprocess shows a preprocessing run's progress: the records read, then the rows
// written (see watch).
func watchPreprocess(display progress.Options, job *PreprocessJob) (p *Progress, end func(ok bool)) {
	if display.Mode == progress.Off || !workersHere() {
		return nil, func(bool) {}
	}
	p = NewProgress()
	records := max(job.Plan.Records, 1)
	rows := records * int64(job.Config.Passes)
	var mu sync.Mutex // guards r and writing
	r := display.Start("preprocess reading", 0, records, "records")
	r.Follow(func() int64 { return min(p.Read(), records) })
	writing := false
	// advance turns to the rows written once the first is.
	advance := func() {
		mu.Lock()
		defer mu.Unlock()
		if writing || p.Written() == 0 {
			return
		}
		writing = true
		r.Finish()
		r = display.Start("preprocess writing", 0, rows, "rows")
		r.Follow(func() int64 { return min(p.Written(), rows) })
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				advance()
			}
		}
	}()
	return p, func(ok bool) {
		close(done)
		<-stopped
		advance()
		mu.Lock()
		defer mu.Unlock()
		if ok {
			r.Finish()
		} else {
			r.End()
		}
		p.Close()
	}
}
