package main

import (
	"context"
	"log/slog"
	"runtime"
	"strings"
)

// quietBeamLogs demotes the Beam SDK's and prism's informational and error logs to debug:
// a dozen lines a run about job servers, job states and workers, and, when a DoFn fails,
// its error repeated five times inside descriptions of bundles and plans. The command
// reports a failed job itself, in one line (the DoFn's own message); --log-level=debug
// shows everything. Beam's warnings pass through, except those that only say a bundle is
// failing (bundleFailureWarnings): the failure itself is what the command reports.
func quietBeamLogs() {
	slog.SetDefault(slog.New(&beamLogFilter{next: slog.Default().Handler()}))
}

// bundleFailureWarnings are the messages of Beam warnings that repeat a failing bundle's
// error: prism logs this one when it asked to split a bundle whose DoFn has just failed,
// which happens or not depending on timing.
var bundleFailureWarnings = map[string]bool{
	"SDK Error from split, aborting splits and failing bundle": true,
}

type beamLogFilter struct{ next slog.Handler }

func (h *beamLogFilter) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l)
}

func (h *beamLogFilter) Handle(ctx context.Context, r slog.Record) error {
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
	return &beamLogFilter{next: h.next.WithAttrs(as)}
}

func (h *beamLogFilter) WithGroup(name string) slog.Handler {
	return &beamLogFilter{next: h.next.WithGroup(name)}
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
