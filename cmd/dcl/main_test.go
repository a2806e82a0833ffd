package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dcl-beam/dcl-beam/internal/testing/testfiles"
	"github.com/dcl-beam/dcl-beam/pipelines"
)

// TestMain lets the tests run the binary as a child process: with DCL_TEST_AS_MAIN set, the
// test binary behaves as dcl itself (the way a Beam runner starts a worker). With
// DCL_TEST_HOLD_AT also set, the child stops at the first line on stderr that holds its
// value until it is sent SIGINT or SIGTERM, so that a test signals it at that point of its
// work and no later.
func TestMain(m *testing.M) {
	if os.Getenv("DCL_TEST_AS_MAIN") == "1" {
		var stderr io.Writer = os.Stderr
		if at := os.Getenv("DCL_TEST_HOLD_AT"); at != "" {
			stderr = holdAt(os.Stderr, at)
		}
		os.Exit(run(os.Args[1:], os.Stdout, stderr))
	}
	os.Exit(m.Run())
}

// holdAt is w, whose first write that holds line blocks, once written, until the process is
// sent SIGINT or SIGTERM; the command's own handler gets the signal too.
func holdAt(w io.Writer, line string) io.Writer {
	signalled := make(chan os.Signal, 1)
	signal.Notify(signalled, os.Interrupt, syscall.SIGTERM)
	return &heldWriter{w: w, line: []byte(line), signalled: signalled}
}

type heldWriter struct {
	w         io.Writer
	line      []byte
	signalled chan os.Signal
	held      atomic.Bool
}

func (h *heldWriter) Write(p []byte) (int, error) {
	n, err := h.w.Write(p)
	if bytes.Contains(p, h.line) && h.held.CompareAndSwap(false, true) {
		<-h.signalled
		signal.Stop(h.signalled)
		time.Sleep(50 * time.Millisecond) // for the command's own handler to take the signal
	}
	return n, err
}

func runDCL(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestHelpListsEverySubcommand(t *testing.T) {
	code, out, _ := runDCL("help")
	if code != exitOK {
		t.Fatalf("dcl help exited %d", code)
	}
	for _, name := range []string{"preprocess", "train", "embed", "knn", "linear", "npc", "tsne", "loss", "shards", "reproduce", "demo", "version"} {
		if !strings.Contains(out, "\n  "+name+" ") {
			t.Errorf("dcl help does not list %q:\n%s", name, out)
		}
	}
}

func TestCommandLineErrorsExit2WithOneLine(t *testing.T) {
	// The worker-start case parses flag.CommandLine: keep its --runner for later tests.
	runner := flag.CommandLine.Lookup("runner")
	old := runner.Value.String()
	t.Cleanup(func() { runner.Value.Set(old) })
	tests := []struct {
		give []string
		want string
	}{
		{[]string{"bogus"}, `dcl: unknown subcommand "bogus"`},
		{[]string{"version", "--no-such-flag"}, "dcl version: unknown flag --no-such-flag (run 'dcl version -h')"},
		{[]string{"train", "-bogus"}, "dcl train: unknown flag --bogus"},
		{[]string{"train", "--batchsize=3"}, "dcl train: unknown flag --batchsize (did you mean --batch-size?)"},
		{[]string{"train", "--lerning-rate=3"}, "dcl train: unknown flag --lerning-rate (run"},
		{[]string{"train", "--epochs=x"}, `dcl train: invalid value "x" for flag --epochs: parse error`},
		{[]string{"train", "--input"}, "dcl train: flag needs an argument: --input"},
		{[]string{"train", "--input=d", "--output=o", "--epochs=-1"}, "dcl train: --epochs=-1: want at least 1"},
		{[]string{"train", "--input=d", "--output=o", "--batch-size=1"}, "dcl train: --batch-size=1: a contrastive batch needs"},
		{[]string{"preprocess", "--dataset=idx", "--input=d", "--output=o", "--view-size=-3"}, "dcl preprocess: --view-size=-3: must be in 1..8192"},
		{[]string{"trian"}, `dcl: unknown subcommand "trian" (did you mean train?)`},
		{[]string{"knn", "--trian=x"}, "dcl knn: unknown flag --trian (did you mean --train?)"},
		{[]string{"-v"}, "dcl: -v goes after a subcommand"},
		{[]string{"--verbose"}, "dcl: --verbose goes after a subcommand"},
		{[]string{"--bogus"}, "dcl: unknown flag --bogus; a command starts with a subcommand"},
		{[]string{"version", "extra"}, "dcl version: takes no arguments"},
		{[]string{"version", "--log-level=loud"}, "dcl version: --log-level"},
		{[]string{"--runner=direct"}, "start a Beam worker"},
		{nil, "Usage: dcl <subcommand>"},
	}
	for _, tt := range tests {
		code, _, stderr := runDCL(tt.give...)
		if code != exitUsage {
			t.Errorf("dcl %q exited %d, want %d", tt.give, code, exitUsage)
		}
		if !strings.Contains(stderr, tt.want) {
			t.Errorf("dcl %q printed %q, want it to contain %q", tt.give, stderr, tt.want)
		}
		if tt.give != nil && strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("dcl %q printed more than one line:\n%s", tt.give, stderr)
		}
	}
}

func TestVersionNamesTheCompiledBackends(t *testing.T) {
	code, out, _ := runDCL("version")
	if code != exitOK {
		t.Fatalf("dcl version exited %d", code)
	}
	for _, want := range []string{"dcl ", "go: go1.", "backends: cpu", "beam: v2."} {
		if !strings.Contains(out, want) {
			t.Errorf("dcl version printed %q, want it to contain %q", out, want)
		}
	}
}

// beamTestCommand is a subcommand that takes Beam's flags, as the pipeline subcommands do.
func beamTestCommand(seen *[]string) *command {
	return &command{
		name: "beamtest", args: "DIR", summary: "test command", beam: true,
		setup: func(fs *flag.FlagSet, _ streams) func(context.Context, []string) error {
			fs.Int("rows", 4, "rows to show")
			fs.String("output", "", "where to write")
			return func(_ context.Context, args []string) error {
				*seen = args
				return nil
			}
		},
	}
}

func TestSubcommandHelpListsEveryFlagWithItsDefault(t *testing.T) {
	var out bytes.Buffer
	err := beamTestCommand(new([]string)).run([]string{"-h"}, &out, &out)
	if err != flag.ErrHelp {
		t.Fatalf("run -h = %v, want flag.ErrHelp", err)
	}
	for _, want := range []string{
		"Usage: dcl beamtest [flags] DIR",
		"--rows=int\n      rows to show (default 4)",
		"--output=string\n      where to write\n", // an empty default is not shown
		"--log-level=string",
		"Beam flags",
		"--runner=string", // a Beam flag, with its default
		"--endpoint=string",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("help does not contain %q:\n%s", want, out.String())
		}
	}
}

// Beam reads its options from flag.CommandLine's set flags (and passes them to workers as
// pipeline options): a Beam flag given to a subcommand must land there.
func TestBeamFlagsReachTheSDK(t *testing.T) {
	runner := flag.CommandLine.Lookup("runner")
	old := runner.Value.String()
	t.Cleanup(func() { runner.Value.Set(old) })

	var positional []string
	var out bytes.Buffer
	err := beamTestCommand(&positional).run([]string{"--runner=direct", "DIR", "--rows=2"}, &out, &out)
	if err != nil {
		t.Fatalf("run = %v", err)
	}
	if got := runner.Value.String(); got != "direct" {
		t.Errorf("--runner reached the SDK as %q, want direct", got)
	}
	var set []string
	flag.Visit(func(f *flag.Flag) { set = append(set, f.Name) })
	if !slices.Contains(set, "runner") {
		t.Errorf("flag.CommandLine does not mark --runner as set (set: %v)", set)
	}
	if !slices.Equal(positional, []string{"DIR"}) {
		t.Errorf("positional arguments = %q, want [DIR]", positional)
	}
}

func TestParseInterspersed(t *testing.T) {
	tests := []struct {
		give     []string
		wantPos  []string
		wantRows int
	}{
		{[]string{"verify", "DIR"}, []string{"verify", "DIR"}, 0},
		{[]string{"inspect", "DIR", "--rows=5"}, []string{"inspect", "DIR"}, 5},
		{[]string{"--rows=3", "inspect", "DIR"}, []string{"inspect", "DIR"}, 3},
		{[]string{"inspect", "--", "--rows=3"}, []string{"inspect", "--rows=3"}, 0},
	}
	for _, tt := range tests {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		rows := fs.Int("rows", 0, "")
		pos, err := parseInterspersed(fs, tt.give)
		if err != nil || !slices.Equal(pos, tt.wantPos) || *rows != tt.wantRows {
			t.Errorf("parseInterspersed(%q) = %q, rows %d, %v; want %q, rows %d", tt.give, pos, *rows, err, tt.wantPos, tt.wantRows)
		}
	}
}

// A Beam runner starts the binary as a worker with --worker and the harness endpoints and no
// subcommand. The binary must hand control to the SDK harness (which then dials the runner's
// control endpoint and keeps retrying) rather than reject the command line.
func TestWorkerStartHandsOverToTheHarness(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0],
		"--worker=true", "--id=worker-1", "--control_endpoint=127.0.0.1:1",
		"--logging_endpoint=127.0.0.1:1", "--semi_persist_dir="+t.TempDir())
	cmd.Env = append(os.Environ(), "DCL_TEST_AS_MAIN=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if ctx.Err() == nil {
		t.Fatalf("the worker exited at once (%v) instead of running the harness:\n%s", err, stderr.String())
	}
	if strings.Contains(stderr.String(), "run 'dcl help'") {
		t.Errorf("the worker start was taken for a usage error:\n%s", stderr.String())
	}
}

// dcl --version prints the version, as dcl version does, not Beam's flag usage; so do -V
// and a subcommand's --version.
func TestVersionFlag(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"-version"}, {"version"}, {"-V"}, {"train", "--version"}, {"knn", "-V"}} {
		code, stdout, stderr := runDCL(args...)
		if code != exitOK || !strings.HasPrefix(stdout, "dcl ") || strings.Count(stdout, "\n") > 6 || stderr != "" {
			t.Errorf("dcl %s = %d\nstdout: %s\nstderr: %s", args[0], code, stdout, stderr)
		}
	}
}

// --verbose and -v log at debug level, as --log-level=debug does.
func TestVerboseFlag(t *testing.T) {
	var seen bool
	c := &command{name: "logtest", summary: "test command", setup: func(*flag.FlagSet, streams) func(context.Context, []string) error {
		return func(ctx context.Context, _ []string) error {
			seen = slog.Default().Enabled(ctx, slog.LevelDebug)
			return nil
		}
	}}
	defer slog.SetDefault(slog.Default())
	for _, tt := range []struct {
		give []string
		want bool
	}{{nil, false}, {[]string{"--verbose"}, true}, {[]string{"-v"}, true}, {[]string{"--log-level=debug"}, true}} {
		if err := c.run(tt.give, io.Discard, io.Discard); err != nil {
			t.Fatal(err)
		}
		if seen != tt.want {
			t.Errorf("%q: debug logging %v, want %v", tt.give, seen, tt.want)
		}
	}
}

// A pipeline subcommand's -h lists Beam's flags only under their own heading, after the
// command's own; aliases (-v, -V) are not listed.
func TestHelpKeepsBeamFlagsApart(t *testing.T) {
	code, out, _ := runDCL("preprocess", "-h")
	if code != exitOK {
		t.Fatalf("exit %d", code)
	}
	own, beamPart, ok := strings.Cut(out, "\nBeam flags")
	if !ok {
		t.Fatalf("no Beam flags heading:\n%s", out)
	}
	for _, name := range []string{"--runner=", "--worker_binary=", "--environment_type=", "--project=", "--dry_run"} {
		if strings.Contains(own, "  "+name) || !strings.Contains(beamPart, "  "+name) {
			t.Errorf("%s is not (only) under the Beam heading", name)
		}
	}
	if !strings.Contains(own, "  --verbose\n") || strings.Contains(out, "  --v\n") || strings.Contains(out, "  --V\n") || strings.Contains(out, "  --version") {
		t.Errorf("want --verbose listed, and no -v, -V or --version:\n%s", own)
	}
}

// -h never shows an empty default (a required flag's) or a deprecated name, and --runner's
// default is the runner an empty --runner runs on.
func TestHelpDefaults(t *testing.T) {
	for _, c := range commands() {
		t.Run(c.name, func(t *testing.T) {
			code, out, _ := runDCL(c.name, "-h")
			if code != exitOK {
				t.Fatalf("exit %d", code)
			}
			if strings.Contains(out, `(default "")`) {
				t.Errorf("an empty default is shown:\n%s", out)
			}
			for _, old := range []string{"--data=", "--out=", "--embeddings=", "--knn-data=", "deprecated"} {
				if strings.Contains(out, "\n  "+old) || strings.Contains(out, old+"\n") {
					t.Errorf("the deprecated %s is shown:\n%s", old, out)
				}
			}
			if c.beam && !strings.Contains(out, "  --runner=string\n      pipeline runner: prism, direct") {
				t.Errorf("--runner does not list the runners:\n%s", out)
			}
			if c.beam && !regexp.MustCompile(`--runner=string\n.*\(default "`+pipelines.DefaultRunner+`"\)\n`).MatchString(out) {
				t.Errorf("--runner's default is not %s:\n%s", pipelines.DefaultRunner, out)
			}
		})
	}
	flag.CommandLine.Lookup("runner").Value.Set("")
	if got := pipelines.RunnerName(); got != pipelines.DefaultRunner {
		t.Errorf("an empty --runner runs on %q, -h says %q", got, pipelines.DefaultRunner)
	}
}

// The old names of renamed flags still set the new ones, with a one-line notice on stderr.
func TestRenamedFlags(t *testing.T) {
	tests := []struct {
		command, old, now, value string
	}{
		{"preprocess", "epochs", "passes", "3"},
		{"train", "data", "input", "d"},
		{"train", "out", "output", "o"},
		{"train", "knn-data", "knn-train", "k"},
		{"embed", "data", "input", "d"},
		{"linear", "epochs", "probe-epochs", "7"},
		{"npc", "embeddings", "input", "e"},
		{"tsne", "embeddings", "input", "e"},
		{"reproduce", "out", "output", "o"},
		{"demo", "data", "input", "d"},
		{"demo", "out", "output", "o"},
		{"gpu-check", "data", "input", "d"},
		{"gpu-check", "out", "output", "o"},
	}
	for _, tt := range tests {
		t.Run(tt.command+" --"+tt.old, func(t *testing.T) {
			var stderr bytes.Buffer
			fs := flag.NewFlagSet(tt.command, flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			lookup(tt.command).setup(fs, streams{stdout: io.Discard, stderr: &stderr})
			if err := fs.Parse([]string{"--" + tt.old + "=" + tt.value}); err != nil {
				t.Fatal(err)
			}
			if got := fs.Lookup(tt.now).Value.String(); got != tt.value {
				t.Errorf("--%s=%s set --%s to %q", tt.old, tt.value, tt.now, got)
			}
			if want := fmt.Sprintf("dcl: --%s is deprecated, use --%s\n", tt.old, tt.now); stderr.String() != want {
				t.Errorf("stderr %q, want %q", stderr.String(), want)
			}
		})
	}
}

// Ctrl-C stops a training run cleanly: the bar's line ends before the error, the exit status
// is 130, and the checkpoint written on the way out resumes it.
func TestTrainInterruptExits130(t *testing.T) {
	data, out := t.TempDir(), t.TempDir()
	writeTrainShards(t, data, 12, 8, 2)
	args := []string{"train", "--input", data, "--output", out, "--model", "mlp", "--width", "4", "--batch-size", "4",
		"--epochs", "100000", "--lr", "0.1", "--backend", "cpu", "--progress", "bar", "--checkpoint-every", "0"}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "DCL_TEST_AS_MAIN=1")
	var stderr testfiles.SyncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(stderr.String(), "| epoch") { // the bar shows steps done
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("no progress after 30 s:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 130 {
		t.Fatalf("exit %v, want 130\n%s", err, stderr.String())
	}
	s := stderr.String()
	if !strings.Contains(s, "\ndcl train: interrupted after step") {
		t.Errorf("the error does not start a line of its own:\n%q", s)
	}
	bar := strings.LastIndex(s, "\r")
	if end := strings.Index(s[bar:], "\n"); end < 0 || strings.Index(s, "interrupted after step") < bar+end {
		t.Errorf("the bar's line is not ended before the messages:\n%q", s)
	}
	resumed := append(slices.Clone(args), "--resume", "--max-steps", "1") // 1 step in total: already done
	code, stdout, stderrResumed := runDCL(resumed...)
	if code != exitOK || !strings.Contains(stderrResumed, "; checkpoint ") {
		t.Errorf("resuming the interrupted run = %d\n%s\n%s", code, stdout, stderrResumed)
	}
}

func TestVersionNamesTheCommit(t *testing.T) {
	withVCS := &debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "35f05768e045aa"}, {Key: "vcs.modified", Value: "true"}}}
	clean := &debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "35f05768e045aa"}, {Key: "vcs.modified", Value: "false"}}}
	for _, tc := range []struct {
		name    string
		info    *debug.BuildInfo
		version string
		want    string
	}{
		{"a Makefile build of a modified checkout", withVCS, "v0.9", " (commit 35f0576, modified)"},
		{"a clean checkout", clean, "(devel)", " (commit 35f0576)"},
		{"a version that names the commit already", withVCS, "v0.0.0-20261124062107-35f05768e045+dirty", ""},
		{"no build information", nil, "(devel)", ""},
		{"no VCS information", &debug.BuildInfo{}, "(devel)", ""},
	} {
		if got := vcsSuffix(tc.info, tc.version); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestCodeIdentity: a version that pins the code is the identity; "(devel)" and a modified
// checkout's version are not, so the binary's SHA-256 is added and a rebuild of changed code
// differs (reproduce --rerun-on-code-change compares identities).
func TestCodeIdentity(t *testing.T) {
	old := version
	t.Cleanup(func() { version = old })
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	binary := hex.EncodeToString(sum[:])[:16]
	for _, tt := range []struct{ give, want string }{
		{"v1.2.0", "v1.2.0"},
		{"(devel)", "(devel) binary " + binary},
		{"7728e99-dirty", "7728e99-dirty binary " + binary},
	} {
		version = tt.give
		if got := codeIdentity(); got != tt.want {
			t.Errorf("version %q: identity %q, want %q", tt.give, got, tt.want)
		}
	}
}
