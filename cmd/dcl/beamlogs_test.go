package main

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestBeamLogFilter checks which of Beam's records reach the console at the info level.
// Records with no caller (PC 0) count as Beam's, as the filter documents.
func TestBeamLogFilter(t *testing.T) {
	tests := []struct {
		level slog.Level
		msg   string
		shown bool
	}{
		{slog.LevelInfo, "Job[job-001] state: RUNNING", false},
		{slog.LevelError, "DoFn failed: the same error again", false},
		{slog.LevelWarn, "SDK Error from split, aborting splits and failing bundle", false},
		{slog.LevelWarn, "unable to pull image and it's not local", true},
	}
	for _, tt := range tests {
		var buf bytes.Buffer
		h := &beamLogFilter{next: slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})}
		if err := h.Handle(context.Background(), slog.NewRecord(time.Now(), tt.level, tt.msg, 0)); err != nil {
			t.Fatal(err)
		}
		if shown := strings.Contains(buf.String(), tt.msg); shown != tt.shown {
			t.Errorf("%v %q: shown %v, want %v", tt.level, tt.msg, shown, tt.shown)
		}
	}
}
