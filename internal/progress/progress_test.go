package progress

import (
	"bytes"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dcl-beam/dcl-beam/internal/testing/testfiles"
)

func TestParseMode(t *testing.T) {
	tests := []struct {
		give    string
		want    Mode
		wantErr bool
	}{
		{"auto", Lines, false}, // a buffer is not a terminal
		{"bar", Bar, false},
		{"on", Bar, false},
		{"lines", Lines, false},
		{"off", Off, false},
		{"yes", Off, true},
	}
	for _, tt := range tests {
		got, err := ParseMode(tt.give, &bytes.Buffer{})
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("ParseMode(%q) = %v, %v; want %v, error %v", tt.give, got, err, tt.want, tt.wantErr)
		}
	}
}

// Without a terminal, a line comes at every interval, with the counts, the rate, the ETA
// and the status, while nothing else happens; Finish writes the 100% line.
func TestLinesAtASteadyInterval(t *testing.T) {
	var out testfiles.SyncBuffer
	r := Options{W: &out, Mode: Lines, Interval: 20 * time.Millisecond}.Start("embed", 0, 1000, "rows")
	r.Set(250)
	r.Status("pass 1")
	time.Sleep(110 * time.Millisecond)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) < 3 {
		t.Fatalf("%d lines in 110 ms at a 20 ms interval:\n%s", len(lines), out.String())
	}
	if first := lines[0]; !strings.HasPrefix(first, "embed: 0/1000 rows (0%)") {
		t.Errorf("first line %q, want it at the start", first)
	}
	last := lines[len(lines)-1]
	if !regexp.MustCompile(`^embed: 250/1000 rows \(25%\), [0-9.]+ rows/s, [0-9.]+m?s, ETA [0-9hms.]+ \| pass 1$`).MatchString(last) {
		t.Errorf("line %q lacks done/total, rate, elapsed, ETA or status", last)
	}
	r.Finish()
	lines = strings.Split(strings.TrimSpace(out.String()), "\n")
	if end := lines[len(lines)-1]; !strings.HasPrefix(end, "embed: 1000/1000 rows (100%)") || strings.Contains(end, "ETA") {
		t.Errorf("last line %q, want the stage complete", end)
	}
	n := len(lines)
	time.Sleep(50 * time.Millisecond)
	if got := strings.Count(strings.TrimSpace(out.String()), "\n") + 1; got != n {
		t.Errorf("%d lines after Finish, want %d: a finished stage says nothing more", got, n)
	}
}

// On a terminal the bar is redrawn in place, reaches 100% on Finish and ends its line.
func TestBarRedrawsAndEndsItsLine(t *testing.T) {
	var out testfiles.SyncBuffer
	r := Options{W: &out, Mode: Bar}.Start("train", 10, 100, "steps")
	r.Set(40)
	time.Sleep(2 * barRefresh)
	if s := out.String(); !strings.HasPrefix(s, "\rtrain [") || !strings.Contains(s, "40% 40/100 steps") || strings.Contains(s, "\n") {
		t.Errorf("bar %q: want it redrawn in place with the counts", s)
	}
	r.Finish()
	s := out.String()
	if !strings.HasSuffix(s, "\n") || !strings.Contains(s[strings.LastIndex(s, "\r"):], "[====================] 100% 100/100 steps") {
		t.Errorf("after Finish: %q, want a full bar on a line of its own", s)
	}
}

// End (an interrupt) ends the bar's line without claiming completion.
func TestEndLeavesTheCountAndEndsTheLine(t *testing.T) {
	for _, mode := range []Mode{Bar, Lines} {
		var out testfiles.SyncBuffer
		r := Options{W: &out, Mode: mode, Interval: time.Hour}.Start("train", 0, 100, "steps")
		r.Set(37)
		r.End()
		s := out.String()
		if !strings.HasSuffix(s, "\n") || !strings.Contains(s, "37/100 steps") {
			t.Errorf("mode %v: %q, want the count at the interrupt and a finished line", mode, s)
		}
	}
}

// A sub-stage (the kNN monitor between epochs) has the line while it runs; then the parent's
// comes back.
func TestSubStageHasTheLine(t *testing.T) {
	var out testfiles.SyncBuffer
	r := Options{W: &out, Mode: Lines, Interval: 10 * time.Millisecond}.Start("train", 0, 10, "steps")
	r.Set(5)
	sub := r.Sub("kNN monitor", 200, "images")
	sub.Set(100)
	time.Sleep(60 * time.Millisecond)
	sub.Finish()
	time.Sleep(30 * time.Millisecond) // the next interval
	r.End()
	s := out.String()
	firstKNN, lastKNN := strings.Index(s, "kNN monitor:"), strings.LastIndex(s, "kNN monitor:")
	if firstKNN < 0 || strings.Contains(s[firstKNN:lastKNN], "train:") {
		t.Errorf("train's lines went on while the monitor ran:\n%s", s)
	}
	if !strings.Contains(s, "kNN monitor: 200/200 images (100%)") {
		t.Errorf("the monitor did not finish:\n%s", s)
	}
	if !strings.Contains(s[lastKNN:], "train: 5/10 steps") {
		t.Errorf("train's line did not come back:\n%s", s)
	}
}

// Follow reads a counter kept elsewhere (a pipeline's DoFns).
func TestFollowReadsTheCounter(t *testing.T) {
	var out testfiles.SyncBuffer
	var n int64 = 7
	r := Options{W: &out, Mode: Lines, Interval: time.Hour}.Start("knn", 0, 10, "queries")
	r.Follow(func() int64 { return n })
	r.End()
	if !strings.Contains(out.String(), "knn: 7/10 queries") {
		t.Errorf("%q, want the followed count", out.String())
	}
}

// A nil reporter (progress off) does nothing, and Off starts none.
func TestOffReportsNothing(t *testing.T) {
	var out bytes.Buffer
	r := Options{W: &out, Mode: Off}.Start("x", 0, 1, "u")
	if r != nil {
		t.Fatal("Off started a reporter")
	}
	r.Set(1)
	r.Add(1)
	r.Status("s")
	r.Sub("y", 1, "u").Finish()
	r.Finish()
	r.End()
	if out.Len() != 0 {
		t.Errorf("wrote %q", out.String())
	}
}

// TestSetETAReplacesTheRate checks that a stage's own estimate (training's, which counts its
// kNN monitor) is what the ETA shows, counting down, instead of its rate's.
func TestSetETAReplacesTheRate(t *testing.T) {
	r := Options{W: io.Discard, Mode: Lines}.newReporter("train", 0, 100, "steps")
	now := r.start.Add(10 * time.Second)
	r.done = 50 // at this rate, 10 s left
	if got := r.text(now); !strings.Contains(got, "ETA 10s") {
		t.Fatalf("by rate: %q, want ETA 10s", got)
	}
	r.SetETA(5 * time.Minute)
	if got := r.text(r.etaAt.Add(time.Minute)); !strings.Contains(got, "ETA 4m0s") {
		t.Errorf("a minute after SetETA(5m): %q, want ETA 4m0s", got)
	}
	if got := r.text(r.etaAt.Add(time.Hour)); !strings.Contains(got, "ETA 0s") {
		t.Errorf("past the estimate: %q, want ETA 0s", got)
	}
}

func TestBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 3 << 30: "3.0 GiB"} {
		if got := Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// A stage that works before it counts anything (an encoder compiled before its first batch)
// says so while its count is 0, and shows its own status once it counts.
func TestWaitingSaysWhyTheCountIsZero(t *testing.T) {
	r := Options{W: io.Discard, Mode: Lines}.newReporter("embed", 0, 100, "rows")
	r.Waiting("compiling the encoder")
	r.Status("batch 256")
	if got := r.text(r.start.Add(time.Second)); !strings.Contains(got, "embed: 0/100 rows (0%)") || !strings.Contains(got, "| compiling the encoder") {
		t.Errorf("before the first row: %q, want the count and why it is 0", got)
	}
	r.done = 1
	if got := r.text(r.start.Add(2 * time.Second)); strings.Contains(got, "compiling") || !strings.Contains(got, "| batch 256") {
		t.Errorf("after the first row: %q, want the stage's status, not the waiting one", got)
	}
}
