package cpu

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// opStats accumulates the wall time spent in each kind of operation, for tuning: set
// Config.ProfileOps and read Backend.OpStats.
type opStats struct {
	shapes bool // key by the inputs' shapes too (Config.ProfileShapes)
	mu     sync.Mutex
	byKey  map[string]*OpStat
}

// OpStat is the time spent in one kind of operation: by name (with "/go" when the pure-Go
// backend runs it), and with Config.ProfileShapes by its inputs' shapes.
type OpStat struct {
	Name   string
	Shapes string // the inputs' shapes, with Config.ProfileShapes
	Calls  int
	Time   time.Duration
}

func (s *opStats) add(n *node, d time.Duration) {
	name, shapes := n.statName(), ""
	if s.shapes {
		shapes = n.inputShapes()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byKey == nil {
		s.byKey = make(map[string]*OpStat)
	}
	key := name + "\x00" + shapes
	st := s.byKey[key]
	if st == nil {
		st = &OpStat{Name: name, Shapes: shapes}
		s.byKey[key] = st
	}
	st.Calls++
	st.Time += d
}

// OpStats returns the time spent per operation since the backend was created (or since the
// last ResetOpStats), most expensive first; nil unless Config.ProfileOps is set.
func (be *Backend) OpStats() []OpStat {
	if be.stats == nil {
		return nil
	}
	be.stats.mu.Lock()
	defer be.stats.mu.Unlock()
	var out []OpStat
	for _, s := range be.stats.byKey {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b OpStat) int { return cmp.Compare(b.Time, a.Time) })
	return out
}

// ResetOpStats clears the operation timings.
func (be *Backend) ResetOpStats() {
	if be.stats != nil {
		be.stats.mu.Lock()
		be.stats.byKey = nil
		be.stats.mu.Unlock()
	}
}

// FormatOpStats renders timings as an aligned table.
func FormatOpStats(stats []OpStat) string {
	var total time.Duration
	for _, s := range stats {
		total += s.Time
	}
	var b strings.Builder
	for _, s := range stats {
		name := s.Name
		if len(name) > 60 {
			name = name[:57] + "..."
		}
		fmt.Fprintf(&b, "%-60s %6d calls %10.1f ms %5.1f%%", name, s.Calls, float64(s.Time.Microseconds())/1000, 100*float64(s.Time)/float64(max(total, 1)))
		if s.Shapes != "" {
			b.WriteString("  " + s.Shapes)
		}
		b.WriteByte('\n')
	}
	return b.String()
}
