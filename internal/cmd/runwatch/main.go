// Command runwatch runs a long build or test command so that it is never silent for long: the
// Makefile runs `go build` and `go test` through it.
//
//	runwatch [-label L] [-every 20s] [-packages] -- go build -v …
//	runwatch -gotest [-v] [-every 20s] -- go test -json …
//
// Without -gotest it passes the command's output through and, after -every without a line,
// says it is still running ("build: bin/dcl: still compiling, 1m20s, 312 packages"); with
// -packages the package names `go build -v` prints are counted, not shown. With -gotest it
// reads `go test -json` and prints what `go test` prints, as each package finishes rather than
// in package order ("ok  	pkg	1.2s", and the output of the failed tests of a package that
// fails), and after -every without a line the packages still running, each with its longest
// running test; with -v it prints every line of the tests' output as it comes, as go test -v
// does. Either way it exits with the command's status.
//
// It uses the standard library only, so that `go run` builds it in seconds on a machine
// whose module cache is still empty.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	label := flag.String("label", "", "what the command does, for the lines that say it is still running")
	every := flag.Duration("every", 20*time.Second, "the longest silence before a line saying what is running")
	gotest := flag.Bool("gotest", false, "the command is `go test -json`: print go test's lines as each package finishes")
	packages := flag.Bool("packages", false, "count the package names `go build -v` prints instead of showing them")
	verbose := flag.Bool("v", false, "with -gotest: print the tests' output as it comes, as go test -v does")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: runwatch [-label L] [-every D] [-gotest [-v] | -packages] -- COMMAND [ARG…]\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	os.Exit(run(flag.Args(), *label, *every, *gotest, *packages, *verbose, os.Stdout))
}

// run starts the command, feeds its output to a watcher and returns the exit status to use.
func run(args []string, label string, every time.Duration, gotest, packages, verbose bool, out io.Writer) int {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin = os.Stdin
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintf(os.Stderr, "runwatch: %v\n", err)
		return 1
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		fmt.Fprintf(os.Stderr, "runwatch: %v\n", err)
		return 1
	}
	if label == "" {
		label = args[0]
	}
	w := newWatcher(out, label, gotest, packages, time.Now)
	w.verbose = verbose
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "runwatch: %v\n", err)
		return 1
	}
	// Ctrl-C reaches the command too (same process group); runwatch waits for it to end.
	signal.Ignore(os.Interrupt, syscall.SIGTERM)
	done, ticking := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ticking)
		t := time.NewTicker(every / 4)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				w.tick(every)
			}
		}
	}()
	streams := make(chan struct{}, 2)
	go func() { w.feed(stdout, true); streams <- struct{}{} }()
	go func() { w.feed(stderr, false); streams <- struct{}{} }()
	<-streams
	<-streams
	err = cmd.Wait()
	close(done)
	<-ticking // no tick may print after the command's last line
	code := 0
	if exit, ok := err.(*exec.ExitError); ok {
		code = exit.ExitCode()
		if code < 0 {
			code = 1 // killed by a signal
		}
	} else if err != nil {
		fmt.Fprintf(os.Stderr, "runwatch: %v\n", err)
		code = 1
	}
	if code == 0 && w.failed() {
		code = 1
	}
	return code
}
