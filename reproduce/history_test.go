package reproduce

import (
	"context"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/dcl-beam/dcl-beam/internal/storage"
)

// TestHistoryThatWouldLie: a reproduction that fails while it reports (killed, or out of
// disk) adds no history entry, so the next one does not call it the previous reproduction;
// a figure that is not a number in the history neither breaks the plots nor is compared
// with; a history file whose figures may be null is refused, naming it; and a config that
// differs only in its name may not share the run directory.
func TestHistoryThatWouldLie(t *testing.T) {
	input, out := t.TempDir(), t.TempDir()
	writeBarsIDX(t, input)
	ctx := context.Background()
	clock := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	day := 0
	var rerun []StageKind
	run := func(edit func(string) string) (*Results, error) {
		day++
		now := clock.Add(time.Duration(day) * 24 * time.Hour)
		return Run(ctx, parseTiny(t, input, func(s string) string { return edit(scheduledEdit(1)(s)) }), Options{Out: out, CodeVersion: "v1", Now: func() time.Time { return now }, Rerun: rerun})
	}
	same := func(s string) string { return s }
	first, err := run(same)
	if err != nil {
		t.Fatal(err)
	}

	// The report cannot be written: no history entry.
	report := filepath.Join(out, ReportName)
	if err := os.Remove(report); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(report, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := run(same); err == nil {
		t.Fatal("a reproduction whose report cannot be written succeeded")
	}
	if n := len(historyFiles(t, out)); n != 1 {
		t.Errorf("%d history files after a failed report, want the first reproduction's only", n)
	}
	if err := os.Remove(report); err != nil {
		t.Fatal(err)
	}
	rerun = []StageKind{StageKNN} // a reproduction of its own, not the last one again
	res, err := run(same)
	if err != nil {
		t.Fatal(err)
	}
	if res.Previous == nil || res.Previous.File != first.HistoryFile || len(historyFiles(t, out)) != 2 {
		t.Errorf("previous %+v, want the first reproduction %s", res.Previous, first.HistoryFile)
	}

	// A NaN and an infinity in the history (another tool's rows): plotted and compared as
	// missing figures.
	rows := historyRows(first)
	rows[0].Value, rows[1].Value = math.NaN(), math.Inf(1)
	for i := range rows {
		rows[i].Time = clock.Add(50 * 24 * time.Hour)
	}
	if err := writeHistory(ctx, out, "20260501T000000.000Z.parquet", rows); err != nil {
		t.Fatal(err)
	}
	res, err = run(same)
	if err != nil {
		t.Fatalf("a history with NaN and infinite figures: %v", err)
	}
	for _, c := range res.Changes {
		if (c.Metric == rows[0].Metric || c.Metric == rows[1].Metric) && c.Run == rows[0].Run && c.Previous != nil {
			t.Errorf("%s %s compared with a figure that is not a number: %v", c.Run, c.Metric, *c.Previous)
		}
	}

	// A history file whose value column may be null.
	type nullable struct {
		Time              time.Time `parquet:"time,timestamp(millisecond:utc)"`
		CodeVersion       string    `parquet:"code_version"`
		ConfigFingerprint string    `parquet:"config_fingerprint"`
		Experiment        string    `parquet:"experiment"`
		Run               string    `parquet:"run"`
		Metric            string    `parquet:"metric"`
		Value             *float64  `parquet:"value,optional"`
		Paper             *float64  `parquet:"paper,optional"`
	}
	nulls := filepath.Join(out, HistoryDir, "20260601T000000.000Z.parquet")
	err = storage.Create(ctx, nulls, func(w io.Writer) error {
		pw := parquet.NewGenericWriter[nullable](w)
		if _, err := pw.Write([]nullable{{Time: clock, Experiment: "tiny", Run: "dcl", Metric: "knn_top1"}}); err != nil {
			return err
		}
		return pw.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run(same); err == nil || !strings.Contains(err.Error(), nulls) || !strings.Contains(err.Error(), "column value may be null") {
		t.Errorf("a history file with nulls: %v", err)
	}
	if err := os.Remove(nulls); err != nil {
		t.Fatal(err)
	}

	// Another name, the same computation: refused before any stage.
	_, err = run(func(s string) string { return strings.Replace(s, "name: tiny", "name: tiny-renamed", 1) })
	if err == nil || !strings.Contains(err.Error(), `holds the history of experiment "tiny"`) || !strings.Contains(err.Error(), `not "tiny-renamed"`) {
		t.Errorf("a renamed config in the same run directory: %v", err)
	}
}

// TestKilledAfterItsHistoryEntry: a reproduction stopped after its history entry, before the
// ledger recorded it complete, is complete: running again records it and returns its
// results, and adds no second entry for one reproduction (found by the kill hunt).
func TestKilledAfterItsHistoryEntry(t *testing.T) {
	input, out := t.TempDir(), t.TempDir()
	writeBarsIDX(t, input)
	ctx := context.Background()
	clock := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	day := 0
	var rerun []StageKind
	run := func(edit func(string) string) (*Results, error) {
		day++
		now := clock.Add(time.Duration(day) * 24 * time.Hour)
		return Run(ctx, parseTiny(t, input, edit), Options{Out: out, CodeVersion: "v1", Now: func() time.Time { return now }, Rerun: rerun})
	}
	same := func(s string) string { return s }
	first, err := run(same)
	if err != nil {
		t.Fatal(err)
	}
	// What a kill between the history entry and the ledger's record leaves.
	interrupt := func(historyFile string) {
		l, err := loadLedger(ctx, out)
		if err != nil {
			t.Fatal(err)
		}
		l.CompleteSeq, l.Reporting = 0, historyFile
		if err := storage.SaveJSON(ctx, filepath.Join(out, LedgerName), l); err != nil {
			t.Fatal(err)
		}
	}
	interrupt(first.HistoryFile)
	again, err := run(same)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(historyFiles(t, out)); n != 1 || again.HistoryFile != first.HistoryFile || again.Previous != nil {
		t.Errorf("after a kill past the history entry: %d history files, results of %s (previous %v), want the one reproduction %s",
			n, again.HistoryFile, again.Previous, first.HistoryFile)
	}
	if l, err := loadLedger(ctx, out); err != nil || l.CompleteSeq != l.Seq || l.Reporting != "" {
		t.Errorf("the ledger after recording the reproduction: %+v, %v", l, err)
	}
	// The record is finished once: the next call that runs a stage is a reproduction of its
	// own.
	rerun = []StageKind{StageKNN}
	if res, err := run(same); err != nil || len(historyFiles(t, out)) != 2 || res.Previous == nil {
		t.Errorf("the reproduction after: %v, %d history files", err, len(historyFiles(t, out)))
	}
}
