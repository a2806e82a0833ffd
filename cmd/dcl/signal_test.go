package main

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/reproduce"
)

// TestReproduceSignalledWhileReporting: SIGTERM, or SIGINT, that reaches dcl reproduce in its
// report phase (the child holds at a line of the phase until the signal comes: once its
// plots are written, whose t-SNE heeds the signal itself, or as it starts) ends it with
// 128+N, as in the other phases, saying to run again; it leaves no temporary file and the
// history as it was, and the same command, run again, writes the report and the history
// entry.
func TestReproduceSignalledWhileReporting(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a reproduction")
	}
	root := t.TempDir()
	_, config := writeKillExperiment(t, root)
	out := filepath.Join(root, "out")
	reproduceOnce := func(sig syscall.Signal, at string) (code int, output string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, os.Args[0], "reproduce", "--config="+config, "--output=out", "--progress=off")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "DCL_TEST_AS_MAIN=1")
		w := &watchedOutput{marks: map[string]func(){}}
		if sig != 0 {
			cmd.Env = append(cmd.Env, "DCL_TEST_HOLD_AT="+at)
			w.marks[at] = func() { cmd.Process.Signal(sig) }
		}
		cmd.Stdout, cmd.Stderr = w, w
		err := cmd.Run()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatal(err)
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		return cmd.ProcessState.ExitCode(), w.buf.String()
	}
	history := func() []reproduce.Reproduction {
		t.Helper()
		h, err := reproduce.ReadHistory(context.Background(), out)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	noTemporaries := func(when string) {
		t.Helper()
		filepath.WalkDir(out, func(p string, d fs.DirEntry, err error) error {
			if err == nil && strings.Contains(d.Name(), storage.TempMarker) {
				t.Errorf("%s: %s is left", when, p)
			}
			return nil
		})
	}
	stopped := "dcl reproduce: stopped while reporting"
	const reportPlotsLine = "msg=\"plots written;"

	code, output := reproduceOnce(syscall.SIGTERM, reportPlotsLine)
	if code != 128+int(syscall.SIGTERM) || !strings.Contains(output, stopped) {
		t.Fatalf("SIGTERM while reporting: exit %d, want %d and %q\n%s", code, 128+int(syscall.SIGTERM), stopped, output)
	}
	noTemporaries("after SIGTERM while reporting")
	if h := history(); len(h) != 0 {
		t.Errorf("SIGTERM while reporting left a history entry: %v", h)
	}
	if _, err := os.Stat(filepath.Join(out, reproduce.ReportName)); err == nil {
		t.Errorf("SIGTERM while reporting left a report")
	}
	if code, output := reproduceOnce(0, ""); code != 0 {
		t.Fatalf("the run after SIGTERM: exit %d\n%s", code, output)
	}
	first := history()
	if len(first) != 1 {
		t.Fatalf("the run after SIGTERM left %d history entries, want 1", len(first))
	}
	report, err := os.ReadFile(filepath.Join(out, reproduce.ReportName))
	if err != nil {
		t.Fatalf("the run after SIGTERM wrote no report: %v", err)
	}

	// A reproduction with nothing to run still reports, and stops there too.
	code, output = reproduceOnce(syscall.SIGINT, reportPhaseLine)
	if code != 128+int(syscall.SIGINT) || !strings.Contains(output, stopped) {
		t.Fatalf("SIGINT while reporting: exit %d, want %d and %q\n%s", code, 128+int(syscall.SIGINT), stopped, output)
	}
	noTemporaries("after SIGINT while reporting")
	if h := history(); len(h) != 1 || h[0].File != first[0].File {
		t.Errorf("SIGINT while reporting changed the history: %v, was %v", h, first)
	}
	if got, err := os.ReadFile(filepath.Join(out, reproduce.ReportName)); err != nil || len(got) == 0 {
		t.Errorf("SIGINT while reporting lost the report (%d bytes of %d, %v)", len(got), len(report), err)
	}
	if code, output := reproduceOnce(0, ""); code != 0 {
		t.Fatalf("the run after SIGINT: exit %d\n%s", code, output)
	}
	if h := history(); len(h) != 1 {
		t.Errorf("the run after SIGINT: %d history entries, want 1", len(h))
	}
}
