package reproduce

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/pipelines"
	"github.com/dcl-beam/dcl-beam/trainstep"
)

// MaxStateFile bounds one file of a state archive, and MaxStateFiles their number, so that a
// state read from elsewhere cannot fill the disk.
const (
	MaxStateFile  = 64 << 20
	MaxStateFiles = 10000
)

// SaveState writes, as a gzipped tar, what another machine needs to continue the
// reproduction of cfg in out from where it stands, without what is large and made again
// there: the data (preprocessing is deterministic, and a stage made again with the same
// output does not redo what depends on it), the checkpoints and the embeddings. It holds the
// stage ledger, the history, results.json, report.md and the plots, every baseline's
// evaluations, and for each run its settings (run.json) and, once it is trained and evaluated,
// its summary, training log and evaluations. A run stopped before that is trained again
// there: its checkpoints are too large to carry. RestoreState unpacks it.
func SaveState(ctx context.Context, cfg *Config, out string, w io.Writer) error {
	var files []string
	add := func(rel ...string) error {
		for _, p := range rel {
			ok, err := storage.Exists(ctx, storage.Join(out, p))
			if err != nil {
				return err
			}
			if ok {
				files = append(files, p)
			}
		}
		return nil
	}
	glob := func(dir, pattern string) error {
		found, err := storage.List(ctx, storage.Join(out, dir, pattern))
		if err != nil {
			return err
		}
		for _, p := range found {
			files = append(files, path.Join(dir, storage.Base(p)))
		}
		return nil
	}
	if err := add(LedgerName, ResultsName, ReportName); err != nil {
		return err
	}
	for _, g := range []string{HistoryDir, PlotsDir} {
		if err := glob(g, "*"); err != nil {
			return err
		}
	}
	r := &runner{cfg: cfg}
	for _, run := range cfg.Runs {
		rel := path.Join(RunsDir, run.Name)
		dir := storage.Join(out, rel)
		if err := add(path.Join(rel, runRecordName)); err != nil {
			return err
		}
		s, err := readSummary(ctx, dir)
		if err != nil {
			return err
		}
		if s == nil || !s.Finished {
			continue
		}
		npc := r.firstOfCell(run)
		if need, err := r.evaluationsNeeded(ctx, dir, npc); err != nil || need {
			continue // not evaluated yet: trained again where it continues
		}
		if err := add(path.Join(rel, trainstep.SummaryName), path.Join(rel, trainstep.LogName), path.Join(rel, "knn.json"), path.Join(rel, "linear.json")); err != nil {
			return err
		}
		if cfg.Evaluate.Has(pipelines.EvalNPC) && npc {
			if err := glob(path.Join(rel, "npc"), "*"); err != nil {
				return err
			}
		}
	}
	for _, b := range cfg.Evaluate.Baselines {
		rel := path.Join(BaselinesDir, b)
		if err := add(path.Join(rel, "knn.json"), path.Join(rel, "linear.json")); err != nil {
			return err
		}
	}
	zw := gzip.NewWriter(w)
	tw := tar.NewWriter(zw)
	for _, rel := range files {
		data, err := storage.ReadFile(ctx, storage.Join(out, rel))
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: rel, Mode: 0o644, Size: int64(len(data)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}

// ErrNotEmpty is RestoreState's answer for a run directory that already holds a
// reproduction: its own state is newer than any carried one, and the two are not mixed.
var ErrNotEmpty = errors.New("the run directory already holds a reproduction")

// statePatterns are the files a state may hold (path.Match patterns, relative to the run
// directory): what SaveState writes. RestoreState refuses any other entry.
var statePatterns = []string{
	LedgerName, ResultsName, ReportName, HistoryDir + "/*", PlotsDir + "/*",
	RunsDir + "/*/" + runRecordName, RunsDir + "/*/" + trainstep.SummaryName, RunsDir + "/*/" + trainstep.LogName,
	RunsDir + "/*/knn.json", RunsDir + "/*/linear.json", RunsDir + "/*/npc/*",
	BaselinesDir + "/*/knn.json", BaselinesDir + "/*/linear.json",
}

// isStateFile reports whether rel (clean and relative) is a file a state may hold.
func isStateFile(rel string) bool {
	for _, p := range statePatterns {
		if ok, _ := path.Match(p, rel); ok {
			return true
		}
	}
	return false
}

// restoringDir is where RestoreState unpacks a state before it moves its files into place.
const restoringDir = ".restoring-state"

// RestoreState unpacks a state that SaveState wrote into out, which must not hold a
// reproduction yet (no stages.json). Every entry must be a regular file that SaveState
// writes (statePatterns), inside out; name is the state's name for messages. The state is
// unpacked into a hidden folder of out first and its files moved into place only once every
// entry is read, so that a refused or damaged state leaves nothing of itself in out, and the
// ledger last, so that a restore cut short leaves no ledger that names it.
func RestoreState(ctx context.Context, out string, r io.Reader, name string) error {
	if ok, err := storage.Exists(ctx, storage.Join(out, LedgerName)); err != nil || ok {
		if err == nil {
			err = fmt.Errorf("%w (%s): restore %s into an empty one", ErrNotEmpty, storage.Join(out, LedgerName), name)
		}
		return err
	}
	staging := storage.Join(out, restoringDir)
	// What a restore killed before its moves left.
	if err := storage.RemoveTree(ctx, staging); err != nil {
		return err
	}
	files, err := unpackState(ctx, staging, r, name)
	if err != nil {
		if rmErr := storage.RemoveTree(ctx, staging); rmErr != nil {
			return errors.Join(err, rmErr)
		}
		return err
	}
	for _, rel := range files { // the ledger is the last
		if err := storage.Rename(ctx, storage.Join(staging, rel), storage.Join(out, rel)); err != nil {
			return err
		}
	}
	return storage.RemoveTree(ctx, staging)
}

// unpackState writes the entries of the state r into staging and returns their names, the
// ledger's last.
func unpackState(ctx context.Context, staging string, r io.Reader, name string) ([]string, error) {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("%s is not a gzipped state: %w", name, err)
	}
	tr := tar.NewReader(zr)
	var files []string
	seen, hasLedger := map[string]bool{}, false
	for n := 0; ; n++ {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if n >= MaxStateFiles {
			return nil, fmt.Errorf("%s holds more than %d files: not a state SaveState wrote", name, MaxStateFiles)
		}
		clean := path.Clean(h.Name)
		if h.Typeflag != tar.TypeReg || path.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, "../") || strings.Contains(clean, `\`) {
			return nil, fmt.Errorf("%s: entry %q is not a file inside the run directory", name, h.Name)
		}
		if !isStateFile(clean) {
			return nil, fmt.Errorf("%s: entry %q is no file a state holds (%s): not a state SaveState wrote", name, h.Name, strings.Join(statePatterns, ", "))
		}
		if seen[clean] {
			return nil, fmt.Errorf("%s: entry %q is given twice", name, h.Name)
		}
		seen[clean] = true
		if h.Size > MaxStateFile {
			return nil, fmt.Errorf("%s: entry %q is %d bytes, more than a state holds (%d)", name, h.Name, h.Size, MaxStateFile)
		}
		data, err := io.ReadAll(io.LimitReader(tr, MaxStateFile+1))
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", name, h.Name, err)
		}
		if err := storage.WriteFile(ctx, storage.Join(staging, clean), data); err != nil {
			return nil, err
		}
		if clean == LedgerName {
			hasLedger = true
			continue
		}
		files = append(files, clean)
	}
	if !hasLedger {
		return nil, fmt.Errorf("%s has no %s: not a state SaveState wrote", name, LedgerName)
	}
	return append(files, LedgerName), nil
}
