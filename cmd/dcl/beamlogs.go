package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strings"
)

// dryRun is Beam's --dry_run (the Dataflow runner's flag), false where it is not registered.
func dryRun() bool {
	f := flag.Lookup("dry_run")
	if f == nil {
		return false
	}
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return false
	}
	b, _ := g.Get().(bool)
	return b
}

// quietBeamLogs demotes the Beam SDK's and prism's informational and error logs to debug:
// a dozen lines a run about job servers, job states and workers, and, when a DoFn fails,
// its error repeated five times inside descriptions of bundles and plans. The command
// reports a failed job itself, in one line (the DoFn's own message); --log-level=debug
// shows everything. Beam's warnings pass through, except those that only say a bundle is
// failing (bundleFailureWarnings): the failure itself is what the command reports.
//
// One message is not a log line but the command's result: the Dataflow job that --dry_run
// translates, which Beam's runner can only log (dataflowlib.PrintJob). It goes to job
// (stdout), whatever the log level.
func quietBeamLogs(job io.Writer) {
	slog.SetDefault(slog.New(&beamLogFilter{next: slog.Default().Handler(), job: job}))
}

// bundleFailureWarnings are the messages of Beam warnings that repeat a failing bundle's
// error: prism logs this one when it asked to split a bundle whose DoFn has just failed,
// which happens or not depending on timing.
var bundleFailureWarnings = map[string]bool{
	"SDK Error from split, aborting splits and failing bundle": true,
}

type beamLogFilter struct {
	next slog.Handler
	job  io.Writer
}

// isTranslatedJob reports whether a Beam log message is the JSON of a Dataflow job, as
// dataflowlib.PrintJob logs it on a dry run. A portable (runner v2) job carries no steps: the
// pipeline travels as a staged proto, so the job's type is what marks it.
func isTranslatedJob(msg string) bool {
	if !strings.HasPrefix(msg, "{") || !json.Valid([]byte(msg)) {
		return false
	}
	var job struct {
		Environment json.RawMessage `json:"environment"`
		Type        string          `json:"type"`
	}
	return json.Unmarshal([]byte(msg), &job) == nil && len(job.Environment) > 0 && strings.HasPrefix(job.Type, "JOB_TYPE_")
}

func (h *beamLogFilter) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l) || h.job != nil && l == slog.LevelInfo && dryRun()
}

func (h *beamLogFilter) Handle(ctx context.Context, r slog.Record) error {
	if h.job != nil && r.Level == slog.LevelInfo && fromBeam(r.PC) && dryRun() && isTranslatedJob(r.Message) {
		_, err := fmt.Fprintln(h.job, r.Message)
		return err
	}
	if !h.next.Enabled(ctx, r.Level) {
		return nil
	}
	demote := r.Level > slog.LevelDebug && (r.Level != slog.LevelWarn || bundleFailureWarnings[r.Message])
	if demote && fromBeam(r.PC) {
		if !h.next.Enabled(ctx, slog.LevelDebug) {
			return nil
		}
		r.Level = slog.LevelDebug
	}
	return h.next.Handle(ctx, r)
}

func (h *beamLogFilter) WithAttrs(as []slog.Attr) slog.Handler {
	return &beamLogFilter{next: h.next.WithAttrs(as), job: h.job}
}

func (h *beamLogFilter) WithGroup(name string) slog.Handler {
	return &beamLogFilter{next: h.next.WithGroup(name), job: h.job}
}

// fromBeam reports whether a log record comes from Beam's code. Records without a caller
// come through the standard library's log package, which only Beam's worker logging
// uses here (to replay messages it could not send to the runner).
func fromBeam(pc uintptr) bool {
	if pc == 0 {
		return true
	}
	f, _ := runtime.CallersFrames([]uintptr{pc}).Next()
	return strings.HasPrefix(f.Function, "github.com/apache/beam/")
}
