package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
)

// watcher prints what a command writes, and what is running when it has been silent for long.
type watcher struct {
	mu       sync.Mutex
	out      io.Writer
	label    string
	gotest   bool
	packages bool
	verbose  bool // gotest: print the tests' output as it comes
	now      func() time.Time
	start    time.Time
	last     time.Time // when a line was last printed

	compiled int // package names counted (packages)

	pkgs     map[string]*pkgState // packages started and not finished (gotest)
	done     int
	anyFails bool
}

// pkgState is a package whose test binary runs.
type pkgState struct {
	started time.Time
	running map[string]time.Time // tests started and not finished
	failed  map[string]bool
	lines   []outputLine // every output line, to print those of failed tests
}

type outputLine struct{ test, text string }

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action     string
	Package    string
	ImportPath string // build-output and build-fail events
	Test       string
	Output     string
}

func newWatcher(out io.Writer, label string, gotest, packages bool, now func() time.Time) *watcher {
	t := now()
	return &watcher{out: out, label: label, gotest: gotest, packages: packages, now: now, start: t, last: t, pkgs: map[string]*pkgState{}}
}

// packageName matches the lines `go build -v` prints: one import path each.
var packageName = regexp.MustCompile(`^[\w.~-]+(/[\w.~+-]+)*$`)

// feed reads one of the command's streams to its end.
func (w *watcher) feed(r io.Reader, stdout bool) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			w.line(line, stdout)
		}
		if err != nil {
			return
		}
	}
}

func (w *watcher) line(line string, stdout bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !strings.HasSuffix(line, "\n") {
		line += "\n"
	}
	if w.gotest && stdout && strings.HasPrefix(line, "{") {
		var ev event
		if json.Unmarshal([]byte(line), &ev) == nil && ev.Action != "" {
			w.event(ev)
			return
		}
	}
	if w.packages && !stdout && packageName.MatchString(strings.TrimSpace(line)) {
		w.compiled++
		return
	}
	w.print(line)
}

func (w *watcher) print(s string) {
	io.WriteString(w.out, s)
	w.last = w.now()
}

func (w *watcher) event(ev event) {
	switch ev.Action {
	case "build-output":
		w.print(ev.Output)
		return
	case "build-fail":
		w.anyFails = true
		return
	}
	p := w.pkgs[ev.Package]
	if p == nil {
		p = &pkgState{started: w.now(), running: map[string]time.Time{}, failed: map[string]bool{}}
		w.pkgs[ev.Package] = p
	}
	switch ev.Action {
	case "run":
		p.running[ev.Test] = w.now()
	case "output":
		if w.verbose {
			w.print(ev.Output)
			return
		}
		p.lines = append(p.lines, outputLine{ev.Test, ev.Output})
	case "pass", "skip", "fail":
		if ev.Test != "" {
			delete(p.running, ev.Test)
			if ev.Action == "fail" {
				p.failed[ev.Test] = true
			}
			return
		}
		w.finish(ev.Package, p, ev.Action == "fail")
	}
}

// finish prints what go test prints for a package that ended: its result line, and for a
// failure the output of the failed tests and of the package itself, in the order it came.
func (w *watcher) finish(name string, p *pkgState, failed bool) {
	delete(w.pkgs, name)
	w.done++
	var b strings.Builder
	for _, l := range p.lines {
		switch {
		case l.test != "" && !(failed && p.failed[l.test]):
		case strings.HasPrefix(l.text, "=== "): // -v's progress lines, which go test alone does not print
		case l.test == "" && !failed && l.text == "PASS\n":
		default:
			b.WriteString(l.text)
		}
	}
	if failed {
		w.anyFails = true
	}
	w.print(b.String())
}

// tick prints what is running if nothing was printed for every.
func (w *watcher) tick(every time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	if now.Sub(w.last) < every {
		return
	}
	w.print(w.status(now) + "\n")
}

func (w *watcher) status(now time.Time) string {
	elapsed := round(now.Sub(w.start))
	if !w.gotest {
		if w.packages {
			return fmt.Sprintf("%s: still compiling, %s, %s compiled", w.label, elapsed, count(w.compiled, "package"))
		}
		return fmt.Sprintf("%s: still running, %s", w.label, elapsed)
	}
	if len(w.pkgs) == 0 {
		if w.done == 0 {
			return fmt.Sprintf("%s: %s, building the test binaries", w.label, elapsed)
		}
		return fmt.Sprintf("%s: %s, %s done, building the others", w.label, elapsed, count(w.done, "package"))
	}
	names := make([]string, 0, len(w.pkgs))
	for n := range w.pkgs {
		names = append(names, n)
	}
	// The longest-running first: they are the ones a reader waits for.
	slices.SortFunc(names, func(a, b string) int { return w.pkgs[a].started.Compare(w.pkgs[b].started) })
	var parts []string
	for i, n := range names {
		if i == 4 {
			parts = append(parts, fmt.Sprintf("%d more", len(names)-i))
			break
		}
		p := w.pkgs[n]
		part := fmt.Sprintf("%s %s", n, round(now.Sub(p.started)))
		if test, since := longestRunning(p.running); test != "" {
			part += fmt.Sprintf(" (%s %s)", test, round(now.Sub(since)))
		}
		parts = append(parts, part)
	}
	return fmt.Sprintf("%s: %s, %s done; running: %s", w.label, elapsed, count(w.done, "package"), strings.Join(parts, ", "))
}

func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// longestRunning returns the test that started first among those running; a test whose
// subtests run counts as itself (its subtests are named after it).
func longestRunning(running map[string]time.Time) (string, time.Time) {
	var name string
	var since time.Time
	for t, s := range running {
		if name == "" || s.Before(since) || s.Equal(since) && t < name {
			name, since = t, s
		}
	}
	return name, since
}

func round(d time.Duration) time.Duration { return d.Round(time.Second) }

func (w *watcher) failed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.anyFails
}
