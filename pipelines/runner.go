package pipelines

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/options/jobopts"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/util/grpcx"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/x/beamx"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/dcl-beam/dcl-beam/internal/registry"
	"github.com/dcl-beam/dcl-beam/internal/usage"
)

// runnerSpec is what the pipelines know of a Beam runner beyond its name.
type runnerSpec struct {
	// aliases are the other names Beam registers it under, accepted as Beam spells them.
	aliases []string
	// jobServer says the runner submits to a job server at --endpoint (nil: never).
	jobServer func() bool
	// needsEndpoint says it has no job server of its own: --endpoint must name one.
	needsEndpoint bool
	// remoteWorkers says its workers run on the service's machines, from --worker_binary
	// (unless it only translates the job: --dry_run).
	remoteWorkers bool
}

// runnerRegistry holds the runners the pipelines run on (docs/runners.md).
var runnerRegistry = func() *registry.Registry[runnerSpec] {
	r := registry.New[runnerSpec]("runner")
	always := func() bool { return true }
	portable := func(aliases ...string) runnerSpec {
		return runnerSpec{aliases: aliases, jobServer: always, needsEndpoint: true}
	}
	for _, e := range []struct {
		name string
		spec runnerSpec
	}{
		// prism runs in this process unless it is given a job server (one it started for an
		// earlier run in this process counts as its own).
		{"prism", runnerSpec{aliases: []string{"PrismRunner"}, jobServer: func() bool { return *jobopts.Endpoint != "" && !inProcessPrism() }}},
		{"direct", runnerSpec{aliases: []string{"DirectRunner"}}},
		{"dataflow", runnerSpec{aliases: []string{"DataflowRunner"}, remoteWorkers: true}},
		{"flink", portable("FlinkRunner")},
		{"spark", portable("SparkRunner")},
		{"universal", portable("portable", "PortableRunner")},
	} {
		r.Register(e.name, e.spec, e.spec.aliases...)
	}
	return r
}()

// Runners are the --runner values the pipelines run on (docs/runners.md). Beam also
// registers aliases (DirectRunner, PortableRunner, …), accepted as Beam spells them.
var Runners = runnerRegistry.Names()

// DefaultRunner is the runner of a command line without --runner: prism, in this process.
const DefaultRunner = "prism"

// JobServerWait bounds how long a run waits for a portable job server's port to accept a
// connection before it says the endpoint does not answer (Beam itself waits two minutes,
// in silence).
const JobServerWait = 10 * time.Second

// A run pings its job server when the connection has been silent for JobServerKeepalive and
// gives it up when no answer comes within JobServerPingTimeout: a job server that hangs, or
// whose machine is lost without its connections being closed, fails the run within about
// their sum (and the time a new connection takes to fail) instead of leaving it waiting for
// ever. Beam's job servers (Java's ServerFactory and prism) accept a ping every 20 s.
const (
	JobServerKeepalive   = 30 * time.Second
	JobServerPingTimeout = 20 * time.Second
)

// RunnerName is the selected runner under its canonical name ("" when unknown).
func RunnerName() string {
	name := *runners.Runner
	if name == "" {
		return DefaultRunner
	}
	canonical, _, err := runnerRegistry.Resolve(name)
	if err != nil {
		return ""
	}
	return canonical
}

// usesJobServer reports a runner that submits to a job server at --endpoint: the portable
// ones, and prism when it is given one (without, prism runs in this process).
func usesJobServer(name string) bool {
	spec, ok := runnerRegistry.Lookup(name)
	return ok && spec.jobServer != nil && spec.jobServer()
}

// inProcessPrism reports that the endpoint is the job server prism started in this process
// for an earlier run (prism.Execute sets --endpoint to it, and loopback workers).
func inProcessPrism() bool {
	inProcess.Lock()
	defer inProcess.Unlock()
	return inProcess.endpoint != "" && inProcess.endpoint == *jobopts.Endpoint
}

var inProcess struct {
	sync.Mutex
	endpoint string
}

// CheckRunner checks the Beam flags that say where pipelines run, before any work: an
// unknown runner, a portable runner without --endpoint, or workers that would need a binary
// Beam could only build with `go build` on this machine are usage errors.
func CheckRunner() error {
	name := RunnerName()
	if name == "" {
		return usage.Errorf("--runner=%q: unknown runner; want one of %s", *runners.Runner, strings.Join(Runners, ", "))
	}
	spec, _ := runnerRegistry.Lookup(name)
	if spec.needsEndpoint && *jobopts.Endpoint == "" {
		return usage.Errorf("--runner=%s needs --endpoint=HOST:PORT, the job server's address", *runners.Runner)
	}
	// Without a binary Beam cross-compiles the program's sources, which only exist on the
	// machine that built dcl: say what to give instead.
	needsBinary := (usesJobServer(name) && !jobopts.IsLoopback()) || (spec.remoteWorkers && !DryRun())
	if needsBinary && *jobopts.WorkerBinary == "" {
		if spec.remoteWorkers {
			return usage.Errorf("--runner=%s needs --worker_binary=PATH, the program its workers run (make worker builds bin/dcl-worker-linux-amd64)", name)
		}
		return usage.Errorf("--runner=%s starts workers from a binary: give --environment_type=LOOPBACK (workers in this process) or --worker_binary=PATH (make worker builds bin/dcl-worker-linux-amd64)", *runners.Runner)
	}
	return CheckTempDir()
}

// CheckTempDir refuses a temporary folder that is missing or not writable: Beam writes its
// worker files there and panics when it cannot (a read-only root file system without
// TMPDIR, as in a container), so this says so, in one line, before any pipeline starts.
func CheckTempDir() error {
	dir := os.TempDir()
	f, err := os.CreateTemp(dir, ".dcl-check-")
	if err != nil {
		return fmt.Errorf("the temporary folder %s cannot be written (%w): Beam keeps its worker files there; set TMPDIR to a writable folder", dir, errors.Unwrap(err))
	}
	f.Close()
	return os.Remove(f.Name())
}

// checkJobServer fails, naming the endpoint, when a job server's port does not accept a
// connection within JobServerWait.
func checkJobServer(ctx context.Context) error {
	if !usesJobServer(RunnerName()) {
		return nil
	}
	endpoint := *jobopts.Endpoint
	d := net.Dialer{Timeout: JobServerWait}
	conn, err := d.DialContext(ctx, "tcp", endpoint)
	if err != nil {
		return fmt.Errorf("the job server at %s (--endpoint) does not answer within %s: %w", endpoint, JobServerWait, err)
	}
	defer conn.Close()
	// A port that accepts is not yet a job server that answers (a proxy with nothing behind
	// it, a stuck process): Beam would then wait two minutes in silence. A gRPC server
	// answers a client's HTTP/2 preface with its SETTINGS frame at once.
	if err := conn.SetDeadline(time.Now().Add(JobServerWait)); err != nil {
		return err
	}
	const preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00" // and an empty SETTINGS frame
	if _, err := conn.Write([]byte(preface)); err != nil {
		return fmt.Errorf("the job server at %s (--endpoint) accepts connections but not data: %w", endpoint, err)
	}
	var frame [9]byte
	n, err := io.ReadFull(conn, frame[:])
	if err != nil && n == 0 {
		return fmt.Errorf("the job server at %s (--endpoint) accepts connections but does not answer within %s (no gRPC reply): %w", endpoint, JobServerWait, err)
	}
	got := frame[:n]
	if bytes.HasPrefix(got, []byte("HTTP/")) {
		// The rest of the status line, for the message: what the server sent at once.
		more := make([]byte, 64)
		m, _ := conn.Read(more)
		got = append(got, more[:m]...)
	}
	return checkSettingsFrame(endpoint, got)
}

// checkSettingsFrame checks the first bytes a server sent back to the HTTP/2 preface: a
// gRPC server's are the header of a SETTINGS frame (RFC 9113 §3.4: length, type 4, flags,
// stream 0). Anything else, an HTTP/1.1 status line above all (a web UI's or a REST port,
// which answers the preface with 400 or 505), would make Beam retry the port for two
// minutes before it fails.
func checkSettingsFrame(endpoint string, got []byte) error {
	const settingsFrame = 0x4
	if len(got) == 9 && got[3] == settingsFrame && got[4]&^0x1 == 0 && got[5]&0x7f|got[6]|got[7]|got[8] == 0 {
		return nil
	}
	if bytes.HasPrefix(got, []byte("HTTP/")) {
		status, _, _ := strings.Cut(string(got), "\r\n")
		return fmt.Errorf("the server at %s (--endpoint) answers in HTTP/1 (%q), not gRPC: it is not a Beam job server's port (give the job server's gRPC port, 8099 by default, not a web or REST port)",
			endpoint, status)
	}
	return fmt.Errorf("the server at %s (--endpoint) does not speak gRPC: its reply to the HTTP/2 preface starts % x, not a SETTINGS frame (give the Beam job server's gRPC port, 8099 by default)",
		endpoint, got)
}

// runPipeline runs p on the runner the Beam flags select, once they pass CheckRunner and
// the job server (if any) answers; name says which pipeline failed. A failed job is reported
// by the DoFn error at its root.
func runPipeline(ctx context.Context, name string, p *beam.Pipeline) (beam.PipelineResult, error) {
	if err := CheckRunner(); err != nil {
		return nil, err
	}
	if err := checkElementCoders(p); err != nil {
		return nil, err
	}
	if err := checkJobServer(ctx); err != nil {
		return nil, err
	}
	if err := CheckTempDir(); err != nil {
		return nil, err
	}
	release := privateTempDir()
	defer release()
	if usesJobServer(RunnerName()) {
		keepaliveEndpoint.Store(*jobopts.Endpoint)
	}
	inProcessBefore := *jobopts.Endpoint == "" && RunnerName() == "prism"
	pr, err := beamx.RunWithMetrics(ctx, p)
	if inProcessBefore && *jobopts.Endpoint != "" {
		inProcess.Lock()
		inProcess.endpoint = *jobopts.Endpoint
		inProcess.Unlock()
	}
	if err != nil {
		slog.Debug("the "+name+" pipeline failed", "error", err)
		if usesJobServer(RunnerName()) {
			if jobServerLost(err) {
				// The job server submitted the job to its runner (a Flink or Spark cluster),
				// which goes on without it: a second run into the same output would be a
				// second writer.
				return nil, fmt.Errorf("the job server at %s (--endpoint) was lost while the %s pipeline ran (%s): "+
					"the job may still be running where the job server sent it (a Flink or Spark cluster); "+
					"let it finish or cancel it there, then run the same command again", *jobopts.Endpoint, name, lostCause(err))
			}
			// The job server may be the one that failed (it lost its cluster): say which
			// it was.
			return nil, fmt.Errorf("%s pipeline failed on the job server at %s (--endpoint): %s", name, *jobopts.Endpoint, rootCause(err))
		}
		return nil, fmt.Errorf("%s pipeline failed: %s", name, rootCause(err))
	}
	return pr, nil
}

// jobServerLost reports an error of the job service's connection itself (the job server
// closed it, died or stopped answering pings) rather than of the job.
func jobServerLost(err error) bool {
	return status.Code(err) == codes.Unavailable
}

// lostCause is the gRPC message of a lost connection, without Beam's wrapping.
func lostCause(err error) string {
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		return se.GRPCStatus().Message()
	}
	return err.Error()
}

// keepaliveEndpoint is the job server of the runs in this process (nil: none): dialJobServer
// pings it, and only it; the workers' own connections keep Beam's defaults.
var keepaliveEndpoint atomic.Value // string

func init() { grpcx.Dial = dialJobServer }

// dialJobServer is Beam's grpcx.DefaultDial (a blocking dial within timeout) with keepalive
// pings (JobServerKeepalive) on connections to the job server.
func dialJobServer(ctx context.Context, endpoint string, timeout time.Duration) (*grpc.ClientConn, error) {
	if e, _ := keepaliveEndpoint.Load().(string); e == "" || e != endpoint {
		return grpcx.DefaultDial(ctx, endpoint, timeout)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	//lint:ignore SA1019 Beam's own dialer blocks the same way (grpcx.DefaultDial), and its callers expect a connected client.
	cc, err := grpc.DialContext(ctx, endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithBlock(),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32)),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: JobServerKeepalive, Timeout: JobServerPingTimeout}))
	if err != nil {
		return nil, fmt.Errorf("failed to dial server at %v: %w", endpoint, err)
	}
	return cc, nil
}

// rootCause returns the message of the DoFn error at the bottom of a runner's error: the
// runners wrap it in a description of the bundle and its plan, which says nothing to the
// user.
func rootCause(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, "] failed:\n"); i >= 0 {
		return strings.TrimSpace(s[i+len("] failed:\n"):])
	}
	return s
}

// loopbackTemp is the temporary folder that runs use while they are in flight. Beam v2.77.0
// creates an empty "beamloopbackworker-*" file in os.TempDir for every loopback job (prism
// in process included) and never removes it (runners/universal/runnerlib/execute.go); with
// TMPDIR pointing here during the run, the file lands here and goes when the last run ends.
var loopbackTemp struct {
	sync.Mutex
	users   int
	dir     string
	prev    string
	hadPrev bool
}

func privateTempDir() (release func()) {
	lt := &loopbackTemp
	lt.Lock()
	defer lt.Unlock()
	if lt.users == 0 {
		dir, err := os.MkdirTemp("", "dcl-beam-run-")
		if err != nil {
			return func() {} // the leftover file is a nuisance, not worth failing the run for
		}
		lt.dir = dir
		lt.prev, lt.hadPrev = os.LookupEnv("TMPDIR")
		os.Setenv("TMPDIR", dir)
	}
	lt.users++
	return func() {
		lt.Lock()
		defer lt.Unlock()
		if lt.users--; lt.users > 0 {
			return
		}
		if lt.hadPrev {
			os.Setenv("TMPDIR", lt.prev)
		} else {
			os.Unsetenv("TMPDIR")
		}
		leftovers, _ := filepath.Glob(filepath.Join(lt.dir, "beamloopbackworker-*"))
		for _, f := range leftovers {
			os.Remove(f)
		}
		// Only when empty: anything else in it belongs to whoever made it meanwhile.
		os.Remove(lt.dir)
	}
}
