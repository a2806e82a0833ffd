package reproduce

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/dcl-beam/dcl-beam/internal/storage"
)

// HistoryDir is the run directory's results history: one Parquet file per completed
// reproduction, never rewritten, so a crash can lose no earlier row. Read the whole folder
// as one table, e.g. DuckDB's read_parquet('history/*.parquet') or pandas'
// read_parquet('history').
const HistoryDir = "history"

// HistoryRow is one figure of one run in one reproduction: a row of the history.
type HistoryRow struct {
	// Time is when the reproduction started (UTC); every row of a reproduction has the same.
	Time        time.Time `parquet:"time,timestamp(millisecond:utc)"`
	CodeVersion string    `parquet:"code_version"`
	// ConfigFingerprint is Config.Fingerprint: rows with the same one come from the same
	// settings.
	ConfigFingerprint string  `parquet:"config_fingerprint"`
	Experiment        string  `parquet:"experiment"`
	Run               string  `parquet:"run"`
	Metric            string  `parquet:"metric"`
	Value             float64 `parquet:"value"`
	// Paper is the paper's figure for this run and metric; null where it has none.
	Paper *float64 `parquet:"paper,optional"`
}

// historySchema is what every history file holds, and what readers check for.
var historySchema = parquet.SchemaOf(HistoryRow{})

// Reproduction is one file of the history: the figures of one completed reproduction.
type Reproduction struct {
	File              string // the file's name in history/
	Time              time.Time
	CodeVersion       string
	ConfigFingerprint string
	Rows              []HistoryRow
}

// Value returns the reproduction's figure for a run and metric, and whether it has one. A
// figure that is not a number (a loss that diverged) is no figure to compare with or plot.
func (h *Reproduction) Value(run, metric string) (float64, bool) {
	for _, r := range h.Rows {
		if r.Run == run && r.Metric == metric {
			if math.IsNaN(r.Value) || math.IsInf(r.Value, 0) {
				return 0, false
			}
			return r.Value, true
		}
	}
	return 0, false
}

// ReadHistory reads every reproduction in out's history, oldest first. A file that is not
// a history file is an error naming it.
func ReadHistory(ctx context.Context, out string) ([]Reproduction, error) {
	files, err := storage.List(ctx, storage.Join(out, HistoryDir, "*.parquet"))
	if err != nil {
		return nil, err
	}
	slices.SortFunc(files, func(a, b string) int { return strings.Compare(storage.Base(a), storage.Base(b)) })
	var hist []Reproduction
	for _, p := range files {
		rows, err := readHistoryFile(ctx, p)
		if err != nil {
			return nil, err
		}
		if len(rows) == 0 {
			continue // a reproduction that measured nothing has nothing to compare
		}
		h := Reproduction{File: storage.Base(p), Time: rows[0].Time, CodeVersion: rows[0].CodeVersion,
			ConfigFingerprint: rows[0].ConfigFingerprint, Rows: rows}
		hist = append(hist, h)
	}
	slices.SortStableFunc(hist, func(a, b Reproduction) int { return a.Time.Compare(b.Time) })
	return hist, nil
}

func readHistoryFile(ctx context.Context, p string) (rows []HistoryRow, err error) {
	f, err := storage.OpenFile(ctx, p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// parquet-go panics on some corrupt files: that is bad input, not a bug.
	defer func() {
		if r := recover(); r != nil {
			rows, err = nil, fmt.Errorf("%s is not a readable Parquet file: %v", p, r)
		}
	}()
	pf, err := parquet.OpenFile(f, f.Size())
	if err != nil {
		return nil, fmt.Errorf("%s is not a readable Parquet file (truncated or corrupt?): %w", p, err)
	}
	for _, want := range historySchema.Fields() {
		got, ok := pf.Schema().Lookup(want.Name())
		if !ok || got.Node.Type().Kind() != want.Type().Kind() {
			return nil, fmt.Errorf("%s is not a results history file: it lacks column %s (%s); its schema is %s", p, want.Name(), want.Type(), pf.Schema())
		}
		// A null would be read as 0 (a figure that passes any gate against it): only the
		// paper's figure may be missing.
		if got.Node.Optional() && !want.Optional() {
			return nil, fmt.Errorf("%s is not a results history file: its column %s may be null, which a figure of this program never is", p, want.Name())
		}
	}
	rows = make([]HistoryRow, pf.NumRows())
	rd := parquet.NewGenericReader[HistoryRow](pf)
	defer rd.Close()
	n, err := rd.Read(rows)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("reading %s: %w", p, err)
	}
	return rows[:n], nil
}

// historyRows are a reproduction's figures: every metric of every run that has it.
func historyRows(res *Results) []HistoryRow {
	var rows []HistoryRow
	eachFigure(res, func(run *RunResult, m Metric, v float64) {
		row := HistoryRow{Time: res.Time, CodeVersion: res.CodeVersion, ConfigFingerprint: res.ConfigFingerprint,
			Experiment: res.Experiment, Run: run.Config.Name, Metric: m.Name, Value: v}
		if p, ok := m.paperOf(run.Paper); ok {
			row.Paper = &p
		}
		rows = append(rows, row)
	})
	return rows
}

// historyName is the name of a new file of out's history for a reproduction started at t:
// named by its time, so that names sort in time order, and never an existing file's.
func historyName(ctx context.Context, out string, t time.Time) (string, error) {
	base := t.UTC().Format("20060102T150405.000Z")
	name := base + ".parquet"
	for i := 2; ; i++ {
		ok, err := storage.Exists(ctx, storage.Join(out, HistoryDir, name))
		if err != nil {
			return "", err
		}
		if !ok {
			return name, nil
		}
		name = fmt.Sprintf("%s-%d.parquet", base, i)
	}
}

// writeHistory adds a reproduction's rows to out's history as the new file name.
func writeHistory(ctx context.Context, out, name string, rows []HistoryRow) error {
	p := storage.Join(out, HistoryDir, name)
	err := storage.Create(ctx, p, func(w io.Writer) error {
		pw := parquet.NewGenericWriter[HistoryRow](w, parquet.CreatedBy("dcl-beam", "", ""))
		if _, err := pw.Write(rows); err != nil {
			return err
		}
		return pw.Close()
	})
	if err != nil {
		return fmt.Errorf("appending to the results history: %w", err)
	}
	return nil
}
