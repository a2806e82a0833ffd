package trainstep

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/dcl-beam/dcl-beam/internal/progress"
	"github.com/dcl-beam/dcl-beam/internal/rawname"
	"github.com/dcl-beam/dcl-beam/internal/storage"
)

// writeSummary writes a finished run's summary.json in out, atomically.
func writeSummary(ctx context.Context, out string, s *Summary) error {
	data, err := json.MarshalIndent(rawname.Valid(s), "", "  ") // paths as given, as text
	if err != nil {
		return err
	}
	return storage.WriteFile(ctx, storage.Join(out, SummaryName), append(data, '\n'))
}

// summaryFromLog rebuilds the summary of a finished run from its final checkpoint's header
// and its log: the last step's loss and mean q, the last monitor results, the parameter count
// from the header's variables. The throughput is not recorded anywhere and stays 0.
func summaryFromLog(ctx context.Context, out string, h *CheckpointHeader, total, stepsPerEpoch int, views string) (Summary, error) {
	sum := Summary{StepsDone: h.State.StepsDone, TotalSteps: total, Epoch: h.State.Epoch, Finished: true, StepsPerEpoch: stepsPerEpoch, Views: views}
	for _, v := range h.Variables {
		if v.Trainable && isModelScope(v.Scope) {
			size := 1
			for _, d := range v.Dims {
				size *= d
			}
			sum.Parameters += size
		}
	}
	log, err := storage.ReadFile(ctx, storage.Join(out, LogName))
	if err != nil {
		return sum, fmt.Errorf("rebuilding the summary of the finished run in %s: %w", out, err)
	}
	for line := range bytes.Lines(keepLogLines(log, h.State.StepsDone)) {
		var entry map[string]any
		if json.Unmarshal(line, &entry) != nil {
			continue
		}
		if _, isStep := entry["loss"]; isStep {
			var l LogLine
			if json.Unmarshal(line, &l) == nil && l.Step == h.State.StepsDone {
				sum.Loss, sum.MeanQ = l.Loss, l.MeanQ
			}
			continue
		}
		for _, k := range []string{"epoch", "step", "time"} {
			delete(entry, k)
		}
		sum.Monitor = entry
	}
	return sum, nil
}

// runLog writes JSON lines to the log in the output folder, and a copy to echo if set:
// appended as it goes for a local folder; rewritten whole at each checkpoint for remote ones
// (objects cannot be appended to).
type runLog struct {
	echo   io.Writer          // a copy of each line; nil: none (or no longer: its reader left)
	logger *slog.Logger       // says once that the copy stopped
	bar    *progress.Reporter // cleared before a copy is printed, in case both are on a terminal
	file   *os.File           // local output
	remote string             // remote output path
	lines  []byte             // the whole log, for remote output
}

// openRunLog opens the log of a run that has done stepsDone steps: lines of later steps
// (written after the checkpoint it resumes from, by a run that was then killed) are dropped,
// so the log holds every step once.
func openRunLog(ctx context.Context, out string, echo io.Writer, stepsDone int) (*runLog, error) {
	path := storage.Join(out, LogName)
	l := &runLog{echo: echo}
	var old []byte
	if ok, err := storage.Exists(ctx, path); err != nil {
		return nil, err
	} else if ok {
		if old, err = storage.ReadFile(ctx, path); err != nil {
			return nil, err
		}
	}
	kept := keepLogLines(old, stepsDone)
	if storage.Scheme(out) != "" {
		l.remote, l.lines = path, kept
		return l, nil
	}
	if len(old) > 0 && len(kept) != len(old) {
		if err := storage.WriteFile(ctx, path, kept); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(out, 0o777); err != nil {
		return nil, fmt.Errorf("creating output folder %s: %w", out, err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o666)
	if err != nil {
		return nil, fmt.Errorf("opening log %s: %w", path, err)
	}
	l.file = f
	return l, nil
}

// keepLogLines returns the lines of a log whose step is at most stepsDone.
func keepLogLines(log []byte, stepsDone int) []byte {
	var kept []byte
	for line := range bytes.Lines(log) {
		var v struct {
			Step *int `json:"step"`
		}
		if json.Unmarshal(line, &v) == nil && v.Step != nil && *v.Step <= stepsDone {
			kept = append(kept, line...)
		}
	}
	return kept
}

func (l *runLog) write(v any) error {
	data, err := json.Marshal(rawname.Valid(v))
	if err != nil {
		return err
	}
	data = append(data, '\n')
	if l.echo != nil {
		l.bar.Clear()
		// The copy is a courtesy (train.jsonl is the log): a reader that went away, as
		// `| head -1` does, stops the copy, not the run.
		if _, err := l.echo.Write(data); err != nil {
			l.echo = nil
			l.logger.Warn("stopped copying the log to stdout; the run goes on, and its log stays in "+LogName, "err", err)
		}
	}
	if l.file != nil {
		if _, err := l.file.Write(data); err != nil {
			return fmt.Errorf("writing log %s: %w", l.file.Name(), err)
		}
		return nil
	}
	l.lines = append(l.lines, data...)
	return nil
}

func (l *runLog) flush(ctx context.Context) error {
	if l.remote == "" {
		return nil
	}
	return storage.WriteFile(ctx, l.remote, l.lines)
}

func (l *runLog) close() {
	if l.file != nil {
		_ = l.file.Close()
	}
}
