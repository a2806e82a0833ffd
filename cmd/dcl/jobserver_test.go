package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners/prism"

	"github.com/dcl-beam/dcl-beam/internal/testing/pipelinetest"
	"github.com/dcl-beam/dcl-beam/internal/testing/testfiles"
	"github.com/dcl-beam/dcl-beam/pipelines"
	"github.com/dcl-beam/dcl-beam/shards"
)

// jobProxy stands for a job server between dcl and prism's: it forwards connections until
// the test kills it (every connection reset, the port closed, as when the job server's
// process dies) or hangs it (connections held open, nothing forwarded, as when the job
// server stops answering or its machine is cut off), and restore brings a job server back at
// the same address.
type jobProxy struct {
	addr, target string

	mu     sync.Mutex
	l      net.Listener
	conns  []net.Conn
	hung   bool
	resume chan struct{} // closed by restore: a hung proxy's held data is dropped
}

func startJobProxy(t *testing.T, target string) *jobProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &jobProxy{addr: l.Addr().String(), target: target, l: l, resume: make(chan struct{})}
	go p.serve(l)
	t.Cleanup(p.kill)
	return p
}

func (p *jobProxy) serve(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.conns = append(p.conns, c)
		hung := p.hung
		p.mu.Unlock()
		if !hung {
			go p.forward(c)
		}
	}
}

func (p *jobProxy) forward(c net.Conn) {
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns = append(p.conns, s)
	p.mu.Unlock()
	go p.pipe(s, c)
	p.pipe(c, s)
}

// pipe copies from src to dst until either closes; data read while the proxy is hung is
// held, never written.
func (p *jobProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			hung, resume := p.hung, p.resume
			p.mu.Unlock()
			if hung {
				<-resume
				return
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// kill resets every connection and closes the port.
func (p *jobProxy) kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.l.Close()
	for _, c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetLinger(0)
		}
		c.Close()
	}
	p.conns = nil
}

func (p *jobProxy) hang() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hung = true
}

// restore is a job server started again at the same address: what the old one held is
// reset, new connections are forwarded.
func (p *jobProxy) restore(t *testing.T) {
	t.Helper()
	p.kill()
	p.mu.Lock()
	defer p.mu.Unlock()
	close(p.resume)
	p.hung, p.resume = false, make(chan struct{})
	l, err := net.Listen("tcp", p.addr)
	if err != nil {
		t.Fatalf("listening at %s again: %v", p.addr, err)
	}
	p.l = l
	go p.serve(l)
}

// cancelUnfinishedJobs cancels, through the job server's own client, every job that has not
// ended: what a user does on the cluster after losing the job server.
func cancelUnfinishedJobs(t *testing.T, client jobpb.JobServiceClient) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	jobs, err := client.GetJobs(ctx, &jobpb.GetJobsRequest{})
	if err != nil {
		t.Fatalf("listing the job server's jobs: %v", err)
	}
	n := 0
	for _, j := range jobs.GetJobInfo() {
		switch j.GetState() {
		case jobpb.JobState_DONE, jobpb.JobState_FAILED, jobpb.JobState_CANCELLED:
			continue
		}
		if _, err := client.Cancel(ctx, &jobpb.CancelJobRequest{JobId: j.GetJobId()}); err != nil {
			t.Fatalf("cancelling job %s: %v", j.GetJobId(), err)
		}
		n++
	}
	return n
}

// TestJobServerLostMidJob loses the job server in the middle of a job, killed or hung: the
// run fails within a bounded time, naming the endpoint and saying that the job may go on
// where the job server sent it; the job indeed goes on (the runner still waits for its
// worker), and once it is cancelled there the same command, against a job server that answers again
// at the same address, completes with a valid output.
func TestJobServerLostMidJob(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a hung job server's connection to time out")
	}
	in := t.TempDir()
	pipelinetest.WriteCIFAR10(t, in, 2)
	port := freeTCPPort(t)
	client, err := prism.CreateJobServer(context.Background(), prism.Options{Port: port})
	if err != nil {
		t.Fatalf("starting prism's job server on port %d: %v", port, err)
	}
	target := fmt.Sprintf("localhost:%d", port)

	// The job's worker never connects: the job stays under way, as a long job does, until it
	// is cancelled. Each start records the process id (exec keeps it), for the clean-up.
	dir := t.TempDir()
	started := filepath.Join(dir, "started")
	stall := filepath.Join(dir, "stall.sh")
	testfiles.WriteFile(t, stall, fmt.Appendf(nil, "#!/bin/sh\necho $$ >> %q\nexec sleep 600\n", started))
	if err := os.Chmod(stall, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		data, _ := os.ReadFile(started)
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	stallConfig, _ := json.Marshal(map[string]string{"command": stall})

	// A hung job server is given up after the keepalive ping goes unanswered, and the
	// metrics call that follows waits for its new connection to fail (grpc's 20 s).
	hungBound := pipelines.JobServerKeepalive + pipelines.JobServerPingTimeout + 20*time.Second + 30*time.Second
	for _, tt := range []struct {
		name   string
		lose   func(*jobProxy)
		within time.Duration
	}{
		{"killed", (*jobProxy).kill, 30 * time.Second},
		{"hung", (*jobProxy).hang, hungBound},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := startJobProxy(t, target)
			out := filepath.Join(t.TempDir(), "out")
			job := []string{"preprocess", "--dataset=cifar10", "--input=" + in, "--output=" + out, "--shards=2", "--unit-records=4",
				"--runner=universal", "--endpoint=" + p.addr}
			before := countLines(t, started)
			var lostAt time.Time
			lost := make(chan struct{})
			go func() {
				defer close(lost)
				deadline := time.Now().Add(2 * time.Minute)
				for countLines(t, started) <= before && time.Now().Before(deadline) {
					time.Sleep(50 * time.Millisecond)
				}
				tt.lose(p)
				lostAt = time.Now()
			}()
			_, stderr, err := dclProcess(t, 5*time.Minute, append(job, "--environment_type=PROCESS",
				"--environment_config="+string(stallConfig), "--worker_binary="+stall)...)
			<-lost
			took := time.Since(lostAt)
			want := "the job server at " + p.addr + " (--endpoint) was lost while the preprocess pipeline ran"
			if err == nil || !strings.Contains(stderr, want) || !strings.Contains(stderr, "cancel it there, then run the same command again") {
				t.Fatalf("after the job server was %s: %v, stderr:\n%s\nwant a failure saying %q", tt.name, err, lastLines(stderr, 5), want)
			}
			if took > tt.within {
				t.Errorf("the run failed %s after the job server was %s; want within %s", took.Round(time.Second), tt.name, tt.within)
			}
			t.Logf("the run failed %s after the job server was %s: %s", took.Round(100*time.Millisecond), tt.name, lastLines(stderr, 1))

			// prism gives a worker a minute to connect: the hung case's job may have ended.
			if n := cancelUnfinishedJobs(t, client); n != 1 && tt.name == "killed" {
				t.Errorf("%d jobs were still under way on the runner after the job server was killed; want the lost run's one", n)
			}
			p.restore(t)
			if stdout, stderr, err := dclProcess(t, 3*time.Minute, append(job, "--environment_type=LOOPBACK")...); err != nil {
				t.Fatalf("the same command once a job server answers: %v\n%s%s", err, stdout, stderr)
			}
			if _, err := shards.Verify(context.Background(), out); err != nil {
				t.Errorf("the re-run's output: %v", err)
			}
		})
	}
}
