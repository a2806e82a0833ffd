package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dcl-beam/dcl-beam/internal/testing/pipelinetest"
	"github.com/dcl-beam/dcl-beam/pipelines"
)

// Runner selection that cannot work is a wrong command line: exit 2, one line that says what
// to give instead, before any input is read. These run as child processes, since Beam's flags
// are process-wide.
func TestRunnerErrorsExit2(t *testing.T) {
	in := t.TempDir()
	pipelinetest.WriteCIFAR10(t, in, 1)
	job := []string{"preprocess", "--dataset=cifar10", "--input=" + in, "--output=" + filepath.Join(t.TempDir(), "out")}
	list := "want one of prism, direct, dataflow, flink, spark, universal"
	tests := []struct {
		give []string
		want string
	}{
		{[]string{"--runner=nonsense"}, list},
		{[]string{"--runner=PRISM"}, list},
		{[]string{"--runner=Direct"}, list},
		{[]string{"--runner=flink"}, "--runner=flink needs --endpoint=HOST:PORT"},
		{[]string{"--runner=universal", "--endpoint=localhost:1"}, "--environment_type=LOOPBACK (workers in this process) or --worker_binary=PATH"},
		{[]string{"--runner=dataflow", "--project=p", "--region=r", "--temp_location=gs://b/t"}, "--runner=dataflow needs --worker_binary=PATH"},
	}
	for _, tt := range tests {
		stdout, stderr, err := dclProcess(t, time.Minute, append(job, tt.give...)...)
		code := exitOK
		if ee, ok := err.(interface{ ExitCode() int }); ok {
			code = ee.ExitCode()
		}
		if code != exitUsage || !strings.Contains(stderr, tt.want) {
			t.Errorf("%q: exit %d, %q; want exit 2 mentioning %q", tt.give, code, stderr, tt.want)
		}
		if n := strings.Count(strings.TrimSpace(stderr), "\n"); n > 0 || stdout != "" {
			t.Errorf("%q: more than one line:\n%s%s", tt.give, stdout, stderr)
		}
	}
}

// A job server that does not answer, or a port that answers in HTTP/1.1 rather than gRPC,
// is named, and the run fails in seconds, not after Beam's two silent minutes; a loopback run leaves no beamloopbackworker-* file in the temporary
// folder (Beam v2.77.0 leaves one per job).
func TestRunnerEndpointAndLeftovers(t *testing.T) {
	in := t.TempDir()
	pipelinetest.WriteCIFAR10(t, in, 1)
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	job := []string{"preprocess", "--dataset=cifar10", "--input=" + in, "--output=" + filepath.Join(t.TempDir(), "out"), "--shards=1"}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	start := time.Now()
	_, stderr, err := dclProcess(t, time.Minute, append(job, "--runner=universal", "--endpoint="+closed, "--environment_type=LOOPBACK")...)
	if err == nil || !strings.Contains(stderr, "job server at "+closed) || time.Since(start) > 30*time.Second {
		t.Errorf("a closed endpoint: %v after %s, %q; want a failure naming %s within 30s", err, time.Since(start), stderr, closed)
	}

	// A port that accepts connections and never answers (a proxy with nothing behind it).
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		var held []net.Conn
		for {
			c, err := silent.Accept()
			if err != nil {
				for _, c := range held {
					c.Close()
				}
				return
			}
			held = append(held, c)
		}
	}()
	start = time.Now()
	_, stderr, err = dclProcess(t, time.Minute, append(job, "--runner=universal", "--endpoint="+silent.Addr().String(), "--environment_type=LOOPBACK")...)
	if err == nil || !strings.Contains(stderr, "job server at "+silent.Addr().String()+" (--endpoint) accepts connections but does not answer within 10s") || time.Since(start) > 30*time.Second {
		t.Errorf("a silent endpoint: %v after %s, %q; want a failure naming it within 30s", err, time.Since(start), stderr)
	}

	// A port that answers in HTTP/1.1 (a web UI's or a REST port): refused at once, not
	// after the deadline of a silent port nor Beam's two minutes.
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "a web dashboard", http.StatusBadRequest)
	}))
	defer web.Close()
	webAddr := strings.TrimPrefix(web.URL, "http://")
	start = time.Now()
	_, stderr, err = dclProcess(t, time.Minute, append(job, "--runner=universal", "--endpoint="+webAddr, "--environment_type=LOOPBACK")...)
	took := time.Since(start)
	if err == nil || !strings.Contains(stderr, "server at "+webAddr+" (--endpoint) answers in HTTP/1") || !strings.Contains(stderr, "not gRPC") || took >= pipelines.JobServerWait {
		t.Errorf("an HTTP/1.1 endpoint: %v after %s, %q; want a failure naming %s as not gRPC within %s", err, took, stderr, webAddr, pipelines.JobServerWait)
	}
	t.Logf("an HTTP/1.1 endpoint failed the run after %s: %s", took.Round(time.Millisecond), strings.TrimSpace(stderr))

	if stdout, stderr, err := dclProcess(t, 2*time.Minute, job...); err != nil {
		t.Fatalf("prism in process: %v\n%s%s", err, stdout, stderr)
	}
	left, _ := filepath.Glob(filepath.Join(tmp, "*"))
	for _, f := range left {
		if strings.Contains(filepath.Base(f), "beamloopbackworker") || strings.HasPrefix(filepath.Base(f), "dcl-beam-run-") {
			info, _ := os.Stat(f)
			t.Errorf("the run left %s behind (%v)", f, info.Size())
		}
	}
}
