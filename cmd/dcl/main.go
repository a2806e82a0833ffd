package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	_ "github.com/apache/beam/sdks/v2/go/pkg/beam/x/beamx" // registers --runner and every runner's flags

	"github.com/dcl-beam/dcl-beam/internal/progress"
	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/internal/usage"
	"github.com/dcl-beam/dcl-beam/pipelines"
)

// Exit codes: 0 success, 1 the command failed, 2 the command line was wrong, 3 a gate of
// dcl reproduce --gate failed, 128+N stopped by signal N (130: Ctrl-C, 143: SIGTERM), as a
// shell reports a process the signal killed.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
	exitGate  = 3
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// usagef makes an error in the command line: it is reported in one line and exits 2, as are
// the usage errors that the packages find in the values they are given.
func usagef(format string, args ...any) error {
	return usage.Errorf(format, args...)
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		printHelp(stderr)
		return exitUsage
	}
	name := args[0]
	switch {
	case name == "help" || name == "-h" || name == "-help" || name == "--help":
		if len(args) > 1 {
			return run([]string{args[1], "-h"}, stdout, stderr)
		}
		printHelp(stdout)
		return exitOK
	case name == "--version" || name == "-version" || name == "-V":
		return run(append([]string{"version"}, args[1:]...), stdout, stderr)
	case name == "-v" || name == "--verbose" || name == "-verbose":
		fmt.Fprintf(stderr, "dcl: %s goes after a subcommand (dcl SUB --verbose logs at debug level); the version is dcl --version\n", name)
		return exitUsage
	case strings.HasPrefix(name, "-"):
		return runWorker(args, stderr)
	}
	cmd := lookup(name)
	if cmd == nil {
		fmt.Fprintf(stderr, "dcl: unknown subcommand %q%s (run 'dcl help')\n", name, didYouMean(name, commandNames(), ""))
		return exitUsage
	}
	err := cmd.run(args[1:], stdout, stderr)
	var coded interface{ ExitCode() int }
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case usage.Is(err):
		fmt.Fprintf(stderr, "dcl %s: %v\n", name, err)
		return exitUsage
	case errors.As(err, &coded):
		fmt.Fprintf(stderr, "dcl %s: %v\n", name, err)
		return coded.ExitCode()
	default:
		fmt.Fprintf(stderr, "dcl %s: %v\n", name, err)
		return exitError
	}
}

// runWorker handles a start without a subcommand: that is how a Beam runner launches the
// binary as an SDK worker (--worker --id … --control_endpoint …). beam.Init hands control
// to the harness and exits; if it returns, the flags did not ask for a worker.
func runWorker(args []string, stderr io.Writer) int {
	// The flags are parsed by a set that forwards to flag.CommandLine, which would exit on an
	// error after printing every flag Beam registers (more than a hundred): the error is
	// reported in one line instead.
	fs := flag.NewFlagSet("dcl", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	forwardBeamFlags(fs)
	if err := fs.Parse(args); err != nil {
		fmt.Fprintf(stderr, "dcl: %s; a command starts with a subcommand (run 'dcl help')\n", flagError(fs, err))
		return exitUsage
	}
	if err := flag.CommandLine.Parse(nil); err != nil {
		return exitUsage
	}
	if f := flag.Lookup("worker"); f != nil && f.Value.String() == "true" {
		if exe, err := os.Executable(); err == nil {
			removeBootCopy(exe)
		}
	}
	beam.Init()
	fmt.Fprintf(stderr, "dcl: flags without a subcommand start a Beam worker (--worker); run 'dcl help'\n")
	return exitUsage
}

// streams are where a command writes: results to stdout; logs, progress and errors to stderr.
type streams struct{ stdout, stderr io.Writer }

// command is one subcommand. setup registers its flags on fs and returns the function that
// runs it once they are parsed, with the positional arguments.
type command struct {
	name    string
	args    string // positional arguments, for the usage line
	summary string
	details string // more for -h, after the summary
	// beam marks subcommands that build Beam pipelines: they accept Beam's flags (--runner,
	// --endpoint, --project, …) and forward them to the SDK.
	beam  bool
	setup func(fs *flag.FlagSet, out streams) func(ctx context.Context, args []string) error
}

func (c *command) run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("dcl "+c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported once, in one line, by main
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	verbose := fs.Bool("verbose", false, "log at debug level (--log-level=debug); -v is the same")
	fs.Var(&aliasFlag{fs: fs, name: "verbose"}, "v", "")
	showVersion := fs.Bool("version", false, "")
	fs.Var(&aliasFlag{fs: fs, name: "version"}, "V", "")
	waitDefault, waitErr := storage.WaitFromEnv()
	storageWait := fs.Duration("storage-timeout", waitDefault,
		"how long an operation on gs:// may go without progress before the command fails (default from "+storage.WaitEnv+")")
	runFn := c.setup(fs, streams{stdout: stdout, stderr: stderr})
	if c.beam {
		forwardBeamFlags(fs)
	}
	positional, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		c.printUsage(stdout, fs)
		return err
	}
	if err != nil {
		return usagef("%s (run 'dcl %s -h')", flagError(fs, err), c.name)
	}
	if *showVersion {
		return printVersion(stdout)
	}
	if *verbose {
		*logLevel = "debug"
	}
	if waitErr != nil {
		return usagef("%v", waitErr)
	}
	if err := storage.SetWait(*storageWait); err != nil {
		return usagef("--storage-timeout=%v: want a positive duration", *storageWait)
	}
	// beam.Init must run before any pipeline is built, and it replaces the default logger.
	if err := flag.CommandLine.Parse(nil); err != nil {
		return err
	}
	beam.Init()
	if c.beam {
		if err := pipelines.CheckRunner(); err != nil {
			return err
		}
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return usagef("--log-level=%q: want debug, info, warn or error", *logLevel)
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})))
	if c.beam {
		quietBeamLogs(stdout)
	}

	ctx, interrupted, stop := interruptContext()
	defer stop()
	release, err := claimOutputs(ctx, c.name, fs, positional)
	if err != nil {
		return err
	}
	defer release()
	err = runFn(ctx, positional)
	if err != nil {
		err = withFlagNames(err, fs)
	}
	if sig, ok := interrupted().(syscall.Signal); ok && err != nil {
		return &exitCodeError{code: 128 + int(sig), err: err}
	}
	return err
}

// aliasFlag is another name of a boolean flag (-v of --verbose), left out of -h.
type aliasFlag struct {
	fs   *flag.FlagSet
	name string
}

func (a *aliasFlag) String() string     { return "" }
func (a *aliasFlag) Set(s string) error { return a.fs.Set(a.name, s) }
func (a *aliasFlag) IsBoolFlag() bool   { return true }

// flagSyntax finds the flag names in the flag package's errors ("flag provided but not
// defined: -bogus", "invalid value \"x\" for flag -epochs: …"), which it writes with one dash.
var flagSyntax = regexp.MustCompile(`(flag |defined: |argument: |for )-{1,2}([^\s=:]+)`)

// flagError rewrites an error of fs.Parse to name flags as the help shows them (--name), and
// for an unknown flag suggests the nearest defined one.
func flagError(fs *flag.FlagSet, err error) string {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
		name = strings.TrimLeft(name, "-")
		var names []string
		fs.VisitAll(func(f *flag.Flag) {
			if isVisible(f) {
				names = append(names, f.Name)
			}
		})
		return fmt.Sprintf("unknown flag --%s%s", name, didYouMean(name, names, "--"))
	}
	return flagSyntax.ReplaceAllString(msg, "$1--$2")
}

// isVisible reports whether -h lists f: not an old name or an alias.
func isVisible(f *flag.Flag) bool {
	switch f.Value.(type) {
	case *deprecatedFlag, *aliasFlag:
		return false
	}
	return f.Usage != ""
}

// didYouMean returns ` (did you mean --x?)` (prefix "--") for the candidate nearest to name,
// when one is near enough to be a slip: at most a third of its letters edited, or the same
// once dashes and underscores are dropped; "" otherwise.
func didYouMean(name string, candidates []string, prefix string) string {
	squash := func(s string) string { return strings.NewReplacer("-", "", "_", "").Replace(strings.ToLower(s)) }
	best, bestDist := "", 0
	for _, c := range candidates {
		d := editDistance(squash(name), squash(c))
		if best == "" || d < bestDist || d == bestDist && c < best {
			best, bestDist = c, d
		}
	}
	if best == "" || bestDist > max(1, len(name)/3) {
		return ""
	}
	return fmt.Sprintf(" (did you mean %s%s?)", prefix, best)
}

// editDistance counts the insertions, deletions, substitutions and swaps of neighbours that
// turn a into b (the optimal string alignment distance), in bytes.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// withFlagNames rewrites the out-of-range values err reports (usage.ValueError) that a flag
// of fs sets as that flag (--epochs=-1), keeping what err says and what it wraps.
func withFlagNames(err error, fs *flag.FlagSet) error {
	msg := usage.FlagText(err, func(name string) bool { return fs.Lookup(name) != nil })
	if msg == err.Error() {
		return err
	}
	return &renamedError{msg: msg, err: err}
}

type renamedError struct {
	msg string
	err error
}

func (e *renamedError) Error() string { return e.msg }
func (e *renamedError) Unwrap() error { return e.err }

// interruptContext returns a context that the first SIGINT (Ctrl-C) or SIGTERM cancels, and
// the signal that did it (nil before). Commands stop cleanly on it (training writes a
// checkpoint to resume from); a second signal kills the process the default way, for a
// command that does not stop soon enough.
func interruptContext() (ctx context.Context, interrupted func() os.Signal, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	var got atomic.Value
	go func() {
		select {
		case sig := <-ch:
			got.Store(sig)
			signal.Stop(ch)
			cancel()
		case <-ctx.Done():
		}
	}()
	interrupted = func() os.Signal {
		sig, _ := got.Load().(os.Signal)
		return sig
	}
	return ctx, interrupted, func() {
		signal.Stop(ch)
		cancel()
	}
}

// exitCodeError is a failure with its own exit status (a failed gate: 3; a signal: 128+N).
type exitCodeError struct {
	code int
	err  error
}

func (e *exitCodeError) Error() string { return e.err.Error() }
func (e *exitCodeError) Unwrap() error { return e.err }
func (e *exitCodeError) ExitCode() int { return e.code }

// renamedFlag keeps a flag's deprecated name working (docs/commands.md, "Flag names"): it sets
// now, says on stderr which name to use, and is left out of -h.
func renamedFlag(fs *flag.FlagSet, out streams, old, now string) {
	fs.Var(&deprecatedFlag{fs: fs, old: old, now: now, stderr: out.stderr}, old, "deprecated name of --"+now)
}

type deprecatedFlag struct {
	fs       *flag.FlagSet
	old, now string
	stderr   io.Writer
}

func (d *deprecatedFlag) String() string { return "" }

func (d *deprecatedFlag) Set(s string) error {
	fmt.Fprintf(d.stderr, "dcl: --%s is deprecated, use --%s\n", d.old, d.now)
	return d.fs.Set(d.now, s)
}

func (d *deprecatedFlag) IsBoolFlag() bool {
	b, ok := d.fs.Lookup(d.now).Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// parseInterspersed parses flags that come before, between or after positional arguments,
// so that `dcl shards verify DIR --json` and `dcl shards verify --json DIR` both work.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		if len(rest) < len(args) && args[len(args)-len(rest)-1] == "--" {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// forwardBeamFlags makes Beam's global flags (registered on flag.CommandLine by the SDK's
// packages) available on fs. Setting one sets the global flag, so the SDK sees it and
// passes it on to workers as a pipeline option, exactly as if main had called flag.Parse.
func forwardBeamFlags(fs *flag.FlagSet) {
	flag.CommandLine.VisitAll(func(f *flag.Flag) {
		if fs.Lookup(f.Name) != nil || strings.HasPrefix(f.Name, "test.") {
			return
		}
		usage, def := f.Usage, f.DefValue
		if f.Name == "runner" {
			// Beam's text names neither the runners nor what an empty --runner runs on.
			usage, def = "pipeline runner: "+strings.Join(pipelines.Runners, ", ")+" (docs/runners.md)", pipelines.DefaultRunner
		}
		fs.Var(&forwardedFlag{global: f}, f.Name, usage)
		fs.Lookup(f.Name).DefValue = def
	})
}

type forwardedFlag struct{ global *flag.Flag }

func (f *forwardedFlag) String() string {
	if f == nil || f.global == nil {
		return ""
	}
	return f.global.Value.String()
}

func (f *forwardedFlag) Set(s string) error { return flag.CommandLine.Set(f.global.Name, s) }

func isForwarded(f *flag.Flag) bool {
	_, ok := f.Value.(*forwardedFlag)
	return ok
}

func (f *forwardedFlag) IsBoolFlag() bool {
	b, ok := f.global.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

func (c *command) printUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: dcl %s [flags]", c.name)
	if c.args != "" {
		fmt.Fprintf(w, " %s", c.args)
	}
	fmt.Fprintf(w, "\n\n%s\n\n", c.summary)
	if c.details != "" {
		fmt.Fprintf(w, "%s\n\n", c.details)
	}
	fmt.Fprintf(w, "Flags:\n")
	var beamFlags []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) {
		switch {
		case !isVisible(f):
		case isForwarded(f):
			beamFlags = append(beamFlags, f)
		default:
			printFlag(w, f)
		}
	})
	if len(beamFlags) > 0 {
		fmt.Fprintf(w, "\nBeam flags (runner selection and pipeline options; see docs/runners.md):\n")
		for _, f := range beamFlags {
			printFlag(w, f)
		}
	}
}

// printFlag prints one flag with its default, unlike flag.PrintDefaults, even when it is
// zero or false; an empty one (a required flag, or one whose absence its text explains) is
// not shown as a default of "".
func printFlag(w io.Writer, f *flag.Flag) {
	typeName, usage := flag.UnquoteUsage(f)
	if v, ok := f.Value.(interface{ TypeName() string }); ok && !strings.Contains(f.Usage, "`") {
		typeName = v.TypeName() // a declared parameter's (registry.Value), which flag calls "value"
	}
	if fwd, ok := f.Value.(*forwardedFlag); ok {
		typeName, _ = flag.UnquoteUsage(fwd.global)
	}
	fmt.Fprintf(w, "  --%s", f.Name)
	if typeName != "" {
		fmt.Fprintf(w, "=%s", typeName)
	}
	fmt.Fprintf(w, "\n      %s", strings.ReplaceAll(usage, "\n", "\n      "))
	if def := f.DefValue; def != "" {
		if isStringFlag(f.Value) {
			def = fmt.Sprintf("%q", def)
		}
		fmt.Fprintf(w, " (default %s)", def)
	}
	fmt.Fprintln(w)
}

func isStringFlag(v flag.Value) bool {
	if fwd, ok := v.(*forwardedFlag); ok {
		v = fwd.global.Value
	}
	g, ok := v.(flag.Getter)
	if !ok {
		return false
	}
	_, isString := g.Get().(string)
	return isString
}

func printHelp(w io.Writer) {
	fmt.Fprintf(w, "dcl: Decoupled Contrastive Learning (Yeh et al., ECCV 2022) on Apache Beam.\n\n")
	fmt.Fprintf(w, "Usage: dcl <subcommand> [flags]\n\nSubcommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-11s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nRun 'dcl <subcommand> -h' for its flags and their defaults, 'dcl --version' (or -V) for the version;\n--verbose (-v) after a subcommand logs at debug level.\n")
}

func commandNames() []string {
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
	}
	return names
}

func lookup(name string) *command {
	for _, c := range commands() {
		if c.name == name {
			return c
		}
	}
	return nil
}

// addProgressFlags registers --progress and --progress-interval, which every long command
// takes, and returns what reads them once parsed.
func addProgressFlags(fs *flag.FlagSet) func(out streams) (progress.Options, error) {
	mode := fs.String("progress", "auto", "progress on stderr: "+progress.Modes)
	interval := fs.Duration("progress-interval", progress.DefaultInterval, "time between two progress lines when stderr is not a terminal")
	return func(out streams) (progress.Options, error) {
		m, err := progress.ParseMode(*mode, out.stderr)
		if err != nil {
			return progress.Options{}, usagef("%w", err)
		}
		if *interval <= 0 {
			return progress.Options{}, usagef("--progress-interval=%v: want a positive duration", *interval)
		}
		return progress.Options{W: out.stderr, Mode: m, Interval: *interval}, nil
	}
}
