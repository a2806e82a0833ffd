// Package progress reports how far a long stage (preprocess, train, embed, knn, linear,
// npc, reproduce) has got, on stderr: a bar redrawn in place on a terminal, and a line at a
// steady interval when stderr is a log file, both with the same facts (done/total, rate,
// elapsed time, ETA and the stage's own status, such as training's loss). A nil *Reporter
// does nothing, so callers report without asking whether anyone looks.
//
// The bar is drawn here rather than by a progress-bar library (the project used
// schollz/progressbar): the two renderings must carry the same facts from one state, a stage
// must be able to lend its line to a sub-stage (the kNN monitor inside training) and take it
// back, and a log must get whole lines at an interval, not a bar's carriage-return redraws.
// The bar itself is a few lines of that one state.
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"
)

// Mode is how progress is shown.
type Mode int

const (
	// Off shows nothing.
	Off Mode = iota
	// Bar redraws one line in place: for terminals.
	Bar
	// Lines writes a line every Options.Interval: for log files, where a redrawn line
	// would be thousands of lines.
	Lines
)

// DefaultInterval is the time between two lines in Lines mode: often enough that a log
// shows a run is alive, rarely enough that a day's run writes a few thousand lines.
const DefaultInterval = 20 * time.Second

// barRefresh is how often a bar is redrawn.
const barRefresh = 200 * time.Millisecond

// Modes are the values ParseMode takes, for a flag's help.
const Modes = "auto (a bar on a terminal, a line every --progress-interval otherwise), bar, lines or off"

// ParseMode reads a --progress value for output to w: auto is a bar when w is a terminal
// and lines otherwise; on is the old name of bar.
func ParseMode(s string, w io.Writer) (Mode, error) {
	switch s {
	case "auto":
		if IsTerminal(w) {
			return Bar, nil
		}
		return Lines, nil
	case "bar", "on":
		return Bar, nil
	case "lines":
		return Lines, nil
	case "off":
		return Off, nil
	}
	return Off, fmt.Errorf("--progress=%q: want %s", s, Modes)
}

// IsTerminal reports whether w is a terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// Options say where and how progress is shown. The zero value shows nothing.
type Options struct {
	W        io.Writer
	Mode     Mode
	Interval time.Duration // Lines: time between lines (0: DefaultInterval)
}

// Start begins reporting a stage called name of total units (0: not known) named unit
// ("steps", "rows"), of which done are done already (a resumed run's): the rate counts only
// what this process does. It returns nil, which reports nothing, when o shows nothing.
// Finish or End it.
func (o Options) Start(name string, done, total int64, unit string) *Reporter {
	if o.Mode == Off || o.W == nil {
		return nil
	}
	r := o.newReporter(name, done, total, unit)
	r.begin()
	return r
}

func (o Options) newReporter(name string, done, total int64, unit string) *Reporter {
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	return &Reporter{o: o, name: name, unit: unit, total: total, done: done, base: done, start: time.Now(),
		quit: make(chan struct{}), stopped: make(chan struct{})}
}

// begin shows the first line and starts the refreshes.
func (r *Reporter) begin() {
	r.mu.Lock()
	r.show(true)
	r.mu.Unlock()
	go r.tick()
}

// Reporter shows one stage's progress. Its methods may be called from any goroutine.
type Reporter struct {
	o          Options
	name, unit string
	count      func() int64 // Follow's counter; nil: Set and Add

	mu          sync.Mutex
	done, total int64
	base        int64 // done at Start
	start       time.Time
	status      string
	waiting     string // the status until the first unit is done
	drawn       string // the bar as last drawn ("" when the line is empty)
	sub         *Reporter
	parent      *Reporter
	// eta, when etaAt is set, is the time left as the stage estimated it at etaAt (SetETA).
	eta      time.Duration
	etaAt    time.Time
	ended    bool
	quit     chan struct{}
	stopped  chan struct{}
	quitOnce sync.Once
}

// Set records that done units are done.
func (r *Reporter) Set(done int64) {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.done = done
	r.mu.Unlock()
}

// Add records n more units done.
func (r *Reporter) Add(n int64) {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.done += n
	r.mu.Unlock()
}

// SetTotal changes the number of units (a stage that learns it late).
func (r *Reporter) SetTotal(total int64) {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.total = total
	r.mu.Unlock()
}

// Status sets the stage's own facts shown after the counts (training's loss, q, lr).
func (r *Reporter) Status(s string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.status = s
	r.mu.Unlock()
}

// Waiting sets the status shown until the first unit is done: what a stage does before it
// counts anything (an encoder read and compiled before its first batch), so that a count
// that stays at 0 says why.
func (r *Reporter) Waiting(s string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.waiting = s
	r.mu.Unlock()
}

// SetETA sets the time the stage has left, for a stage that knows better than its rate so
// far (training, whose kNN monitor pauses the steps): the ETA shown counts down from it until
// the next call.
func (r *Reporter) SetETA(left time.Duration) {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.eta, r.etaAt = left, time.Now()
	r.mu.Unlock()
}

// Follow takes the count done from count, read at every refresh instead of Set: for work
// that counts for itself in other goroutines (a Beam pipeline's DoFns in this process).
func (r *Reporter) Follow(count func() int64) {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.count = count
	r.mu.Unlock()
}

// Sub starts a stage inside r (the kNN evaluation between two training epochs): it is shown
// instead of r until it is finished or ended, then r's line comes back.
func (r *Reporter) Sub(name string, total int64, unit string) *Reporter {
	if r == nil {
		return nil
	}
	s := r.o.newReporter(name, 0, total, unit)
	s.parent = r
	r.mu.Lock()
	r.clearLine()
	r.sub = s
	r.mu.Unlock()
	s.begin()
	return s
}

// Finish shows the stage complete and ends its line: at 100% (done = total), or, for a
// followed count, at the count the work itself kept, which is never claimed.
func (r *Reporter) Finish() {
	if r == nil {
		return
	}
	r.mu.Lock()
	if r.count == nil && r.total > 0 {
		r.done = r.total
	}
	r.mu.Unlock()
	r.stop(true)
}

// End stops reporting without claiming completion (an error, an interrupt), ending the bar's
// line so that what is printed next starts on a line of its own.
func (r *Reporter) End() {
	if r == nil {
		return
	}
	r.stop(false)
}

// Clear erases the bar so that a message can be printed; the next refresh draws it again.
func (r *Reporter) Clear() {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.clearLine()
	r.mu.Unlock()
}

func (r *Reporter) stop(finished bool) {
	r.quitOnce.Do(func() { close(r.quit) })
	<-r.stopped
	r.mu.Lock()
	if !r.ended {
		r.ended = true
		switch {
		case r.o.Mode == Lines:
			r.show(true)
		case r.parent != nil:
			r.clearLine() // a sub-stage's bar makes way for its parent's
		default:
			r.show(true)
			fmt.Fprintln(r.o.W) // the bar stays, and what follows starts on a new line
			r.drawn = ""
		}
	}
	r.mu.Unlock()
	if p := r.parent; p != nil {
		p.mu.Lock()
		if p.sub == r {
			p.sub = nil
			if p.o.Mode == Bar { // a log's next line comes at the next interval
				p.show(true)
			}
		}
		p.mu.Unlock()
	}
}

func (r *Reporter) tick() {
	defer close(r.stopped)
	every := barRefresh
	if r.o.Mode == Lines {
		every = r.o.Interval
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-r.quit:
			return
		case <-t.C:
			r.mu.Lock()
			r.show(false)
			r.mu.Unlock()
		}
	}
}

// show draws the bar (when it changed, or when forced) or writes a line, unless a
// sub-stage has the line. Called with r.mu held.
func (r *Reporter) show(force bool) {
	if r.sub != nil {
		return
	}
	if r.count != nil {
		r.done = r.count()
	}
	text := r.text(time.Now())
	if r.o.Mode == Lines {
		fmt.Fprintln(r.o.W, text)
		return
	}
	text = fit(text, width(r.o.W))
	if text == r.drawn && !force {
		return
	}
	fmt.Fprintf(r.o.W, "\r%s\x1b[K", text)
	r.drawn = text
}

// clearLine erases a drawn bar. Called with r.mu held.
func (r *Reporter) clearLine() {
	if r.o.Mode == Bar && r.drawn != "" {
		fmt.Fprint(r.o.W, "\r\x1b[K")
		r.drawn = ""
	}
}

// text is the stage's state in words. A bar is short, to fit a terminal's line:
// "train [=====>    ] 45% 450/1000 steps 3.1/s ETA 2m57s | loss …"; a log's line says more:
// "train: 450/1000 steps (45%), 3.1 steps/s, 2m25s, ETA 2m57s | loss …".
func (r *Reporter) text(now time.Time) string {
	var b strings.Builder
	elapsed := now.Sub(r.start)
	rate := 0.0
	if s := elapsed.Seconds(); s > 0 {
		rate = float64(r.done-r.base) / s
	}
	frac := 0.0
	if r.total > 0 {
		frac = min(1, max(0, float64(r.done)/float64(r.total)))
	}
	eta := ""
	switch {
	case r.total > 0 && r.done >= r.total:
	case !r.etaAt.IsZero():
		eta = roundDuration(max(0, r.eta-now.Sub(r.etaAt))).String()
	case r.total > 0 && rate > 0:
		eta = roundDuration(time.Duration(float64(r.total-r.done) / rate * float64(time.Second))).String()
	}
	if r.o.Mode == Bar {
		b.WriteString(r.name)
		if r.total > 0 {
			const cells = 20
			full := int(frac * cells)
			b.WriteString(" [" + strings.Repeat("=", full))
			if full < cells {
				b.WriteString(">" + strings.Repeat(" ", cells-full-1))
			}
			fmt.Fprintf(&b, "] %d%% %d/%d %s", int(frac*100), r.done, r.total, r.unit)
		} else {
			fmt.Fprintf(&b, " %d %s", r.done, r.unit)
		}
		if rate > 0 {
			fmt.Fprintf(&b, " %s/s", rateString(rate))
		}
		if eta != "" {
			b.WriteString(" ETA " + eta)
		}
	} else {
		b.WriteString(r.name + ":")
		if r.total > 0 {
			fmt.Fprintf(&b, " %d/%d %s (%d%%)", r.done, r.total, r.unit, int(frac*100))
		} else {
			fmt.Fprintf(&b, " %d %s", r.done, r.unit)
		}
		if rate > 0 {
			fmt.Fprintf(&b, ", %s %s/s", rateString(rate), r.unit)
		}
		fmt.Fprintf(&b, ", %s", roundDuration(elapsed))
		if eta != "" {
			b.WriteString(", ETA " + eta)
		}
	}
	if r.waiting != "" && r.done == r.base {
		b.WriteString(" | " + r.waiting)
	} else if r.status != "" {
		b.WriteString(" | " + r.status)
	}
	return b.String()
}

func rateString(rate float64) string {
	switch {
	case rate >= 100:
		return fmt.Sprintf("%.0f", rate)
	case rate >= 1:
		return fmt.Sprintf("%.1f", rate)
	}
	return fmt.Sprintf("%.3f", rate)
}

func roundDuration(d time.Duration) time.Duration {
	if d >= time.Minute {
		return d.Round(time.Second)
	}
	return d.Round(100 * time.Millisecond)
}

// width is the terminal's width, so that a bar never wraps (a wrapped line is not redrawn
// in place); 0 (no limit) when w is not a terminal.
func width(w io.Writer) int {
	if f, ok := w.(*os.File); ok {
		if cols, _, err := term.GetSize(int(f.Fd())); err == nil && cols > 0 {
			return cols
		}
	}
	return 0
}

// fit cuts s to the cols-1 characters that fit on a line (the last column left free, as
// some terminals wrap when it is written).
func fit(s string, cols int) string {
	rs := []rune(s)
	if cols > 1 && len(rs) > cols-1 {
		return string(rs[:cols-1])
	}
	return s
}

// Bytes writes n bytes for a reader, with a binary prefix: 1.5 GiB.
func Bytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
