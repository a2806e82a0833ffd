package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// writeModule writes a Go module of three packages into a temporary folder: fast (passes at
// once), slow (passes after a while) and broken (one test fails, with a message).
func writeModule(t *testing.T, slow time.Duration) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":            "module example.com/m\n\ngo 1.22\n",
		"fast/fast.go":      "package fast\n",
		"fast/fast_test.go": "package fast\n\nimport \"testing\"\n\nfunc TestFast(t *testing.T) {}\n",
		"slow/slow.go":      "package slow\n",
		"slow/slow_test.go": "package slow\n\nimport (\n\t\"testing\"\n\t\"time\"\n)\n\nfunc TestSlow(t *testing.T) { time.Sleep(" + fmt.Sprint(slow.Milliseconds()) + " * time.Millisecond) }\n",
		"broken/broken.go":  "package broken\n",
		"broken/broken_test.go": "package broken\n\nimport \"testing\"\n\nfunc TestGood(t *testing.T) { t.Log(\"quiet\") }\n\n" +
			"func TestBad(t *testing.T) { t.Run(\"sub\", func(t *testing.T) { t.Fatal(\"the message\") }) }\n",
		"notests/notests.go": "package notests\n",
	}
	for name, text := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestGoTestReportsEachPackage runs `go test -json` on a real module: each package's go test
// line is printed (the slow one last, though it comes first in package order), a failing
// test's output and go test's FAIL lines are kept, a quiet stretch gets a line naming the
// test that runs, and the exit status is go test's.
func TestGoTestReportsEachPackage(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go test")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	dir := writeModule(t, 3*time.Second)
	wd, _ := os.Getwd()
	if err := os.Chdir(dir); err != nil {
		t.Fatal(err)
	}
	defer os.Chdir(wd)
	var out bytes.Buffer
	code := run([]string{goBin, "test", "-json", "-count=1", "./slow", "./fast", "./broken", "./notests"}, "test", 500*time.Millisecond, true, false, false, &out)
	got := out.String()
	if code != 1 {
		t.Errorf("exit status %d, want go test's 1\n%s", code, got)
	}
	for _, want := range []string{
		"ok  \texample.com/m/fast\t",
		"ok  \texample.com/m/slow\t",
		"?   \texample.com/m/notests\t[no test files]",
		"--- FAIL: TestBad/sub",
		"the message",
		"FAIL\texample.com/m/broken\t",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "quiet") || strings.Contains(got, "=== RUN") || strings.Contains(got, `"Action"`) {
		t.Errorf("output holds a passing test's output or raw JSON:\n%s", got)
	}
	if strings.Index(got, "example.com/m/fast") > strings.Index(got, "ok  \texample.com/m/slow") {
		t.Errorf("the fast package was held back until the slow one finished:\n%s", got)
	}
	if !regexp.MustCompile(`test: \d+s, \d packages? done; running: example.com/m/slow \d+s \(TestSlow \d+s\)`).MatchString(got) {
		t.Errorf("no line said what was running while TestSlow slept:\n%s", got)
	}
}

// TestBuildHeartbeat: a quiet command gets a line saying it still runs; package names are
// counted, not shown; other lines pass through; the exit status is the command's.
func TestBuildHeartbeat(t *testing.T) {
	var out bytes.Buffer
	script := `echo a/b >&2; echo example.com/x >&2; echo "go: downloading x v1" >&2; sleep 1.2; exit 3`
	code := run([]string{"sh", "-c", script}, "build: bin/dcl", 300*time.Millisecond, false, true, false, &out)
	if code != 3 {
		t.Errorf("exit status %d, want 3", code)
	}
	got := out.String()
	if !strings.Contains(got, "go: downloading x v1\n") || strings.Contains(got, "a/b") {
		t.Errorf("output %q: want the download line and no package name", got)
	}
	if !regexp.MustCompile(`build: bin/dcl: still compiling, \d+s, 2 packages compiled`).MatchString(got) {
		t.Errorf("no still-compiling line counting 2 packages:\n%s", got)
	}
}

// TestStatusLines: what the quiet-time line says before any package runs, while some run
// (the longest-running first, each with its oldest test) and between packages.
func TestStatusLines(t *testing.T) {
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	var out bytes.Buffer
	w := newWatcher(&out, "test", true, false, clock)
	if got := w.status(now.Add(30 * time.Second)); got != "test: 30s, building the test binaries" {
		t.Errorf("before any package: %q", got)
	}
	feed := func(lines ...string) {
		w.feed(strings.NewReader(strings.Join(lines, "\n")+"\n"), true)
	}
	now = now.Add(40 * time.Second)
	feed(`{"Action":"start","Package":"p/a"}`, `{"Action":"run","Package":"p/a","Test":"TestA"}`)
	now = now.Add(5 * time.Second)
	feed(`{"Action":"start","Package":"p/b"}`, `{"Action":"run","Package":"p/b","Test":"TestB"}`,
		`{"Action":"run","Package":"p/b","Test":"TestB/x"}`)
	now = now.Add(10 * time.Second)
	if got, want := w.status(now), "test: 55s, 0 packages done; running: p/a 15s (TestA 15s), p/b 10s (TestB 10s)"; got != want {
		t.Errorf("while running:\n%q\nwant\n%q", got, want)
	}
	feed(`{"Action":"output","Package":"p/a","Output":"PASS\n"}`, `{"Action":"output","Package":"p/a","Output":"ok  \tp/a\t15s\n"}`,
		`{"Action":"pass","Package":"p/a","Test":"TestA"}`, `{"Action":"pass","Package":"p/a"}`,
		`{"Action":"pass","Package":"p/b"}`)
	if got := w.status(now); got != "test: 55s, 2 packages done, building the others" {
		t.Errorf("between packages: %q", got)
	}
	if out.String() != "ok  \tp/a\t15s\n" {
		t.Errorf("printed %q, want go test's line only", out.String())
	}
}

// With -v every output line is printed as it comes, a passing test's logs included, and
// nothing twice when its package ends.
func TestVerbosePrintsOutputAsItComes(t *testing.T) {
	var out bytes.Buffer
	w := newWatcher(&out, "test", true, false, time.Now)
	w.verbose = true
	feed := func(lines ...string) {
		w.feed(strings.NewReader(strings.Join(lines, "\n")+"\n"), true)
	}
	feed(`{"Action":"start","Package":"p/a"}`, `{"Action":"run","Package":"p/a","Test":"TestA"}`,
		`{"Action":"output","Package":"p/a","Test":"TestA","Output":"    a_test.go:9: on Flink 1.19.0\n"}`)
	if out.String() != "    a_test.go:9: on Flink 1.19.0\n" {
		t.Fatalf("printed %q before the test ended, want its log line", out.String())
	}
	feed(`{"Action":"pass","Package":"p/a","Test":"TestA"}`, `{"Action":"output","Package":"p/a","Output":"ok  \tp/a\t15s\n"}`,
		`{"Action":"pass","Package":"p/a"}`)
	if want := "    a_test.go:9: on Flink 1.19.0\nok  \tp/a\t15s\n"; out.String() != want {
		t.Errorf("printed %q, want %q", out.String(), want)
	}
}
