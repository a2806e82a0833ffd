package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dcl-beam/dcl-beam/internal/testing/pipelinetest"
	"github.com/dcl-beam/dcl-beam/internal/testing/testfiles"
)

// The Flink and Spark tests run the pipelines on Apache Flink and Spark through Beam's job
// servers for them, fetched by make deps-flink and make deps-spark (scripts/flink.sh,
// scripts/spark.sh), with PROCESS workers that Beam's boot loader starts from the staged
// worker binary, and compare every output with prism's. make test-flink and make test-spark
// run them with the cgo-free worker binary (DCL_WORKER_BINARY) and fail without Java or the
// jars (DCL_FLINK_REQUIRED, DCL_SPARK_REQUIRED); elsewhere they skip, saying why, in one line.

// jobServerSetup is what the tests on one of Beam's Java job servers share: the runner, the
// repository's script for it, the worker binary and Beam's boot loader.
type jobServerSetup struct {
	runner               string // flink or spark: --runner and scripts/RUNNER.sh
	name                 string // Flink or Spark, in messages
	root, script, worker string
	bootLog              string
	started              time.Time
}

func needFlink(t *testing.T) *jobServerSetup { return needJobServer(t, "flink", "Flink") }

func needJobServer(t *testing.T, runner, name string) *jobServerSetup {
	t.Helper()
	if testing.Short() {
		t.Skipf("starts JVMs (make test-%s)", runner)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	s := &jobServerSetup{runner: runner, name: name, root: root, script: filepath.Join(root, "scripts", runner+".sh"), started: time.Now()}
	out, err := exec.Command(s.script, "check").CombinedOutput()
	if err != nil {
		msg := strings.TrimSpace(string(out))
		if os.Getenv("DCL_"+strings.ToUpper(runner)+"_REQUIRED") != "" {
			t.Fatalf("%s is required here (make test-%s) but: %s", name, runner, msg)
		}
		t.Skipf("%s tests skipped: %s", name, msg)
	}
	t.Logf("on %s", strings.TrimSpace(string(out)))

	s.worker = os.Getenv("DCL_WORKER_BINARY")
	if s.worker == "" {
		// The test binary is dcl when DCL_TEST_AS_MAIN is set (TestMain), the job server and
		// boot pass the variable on to the workers they start.
		if s.worker, err = os.Executable(); err != nil {
			t.Fatal(err)
		}
		t.Setenv("DCL_TEST_AS_MAIN", "1")
	}
	t.Logf("worker binary %s", s.worker)
	dir := t.TempDir()
	boot := filepath.Join(dir, "boot")
	build := exec.Command("go", "build", "-o", boot, "github.com/apache/beam/sdks/v2/go/container")
	if msg, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building Beam's boot loader: %v\n%s", err, msg)
	}
	s.bootLog = filepath.Join(dir, "starts.log")
	t.Setenv("DCL_BEAM_BOOT", boot)
	t.Setenv("DCL_BOOT_LOG", s.bootLog)
	return s
}

// runnerFlags are the Beam flags of a job on the job server at endpoint, with PROCESS workers
// (deploy/flink/boot.sh serves any runner's PROCESS environment).
func (s *jobServerSetup) runnerFlags(endpoint string) []string {
	config, _ := json.Marshal(map[string]string{"command": filepath.Join(s.root, "deploy", "flink", "boot.sh")})
	return []string{"--runner=" + s.runner, "--endpoint=" + endpoint, "--environment_type=PROCESS",
		"--environment_config=" + string(config), "--worker_binary=" + s.worker}
}

// jvm is a JVM that scripts/flink.sh or scripts/spark.sh started in a process group of its
// own (with the workers its TaskManager starts).
type jvm struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// start starts a JVM with the runner's script. Its files (Flink's blob store and working
// folders, the job server's staged artifacts, the workers' folders) go into a temporary
// folder of its own, removed with the test once the JVM is killed.
func (s *jobServerSetup) start(t *testing.T, name string, env []string, args ...string) *jvm {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(s.script, args...)
	cmd.Env = append(append(os.Environ(), "TMPDIR="+t.TempDir()), env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	j := &jvm{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		cmd.Wait()
		f.Close()
		close(j.done)
	}()
	t.Cleanup(func() { j.kill(t) })
	return j
}

// kill ends the JVM and whatever it started, at once (SIGKILL to its process group), as a
// machine that is lost would.
func (j *jvm) kill(t *testing.T) {
	select {
	case <-j.done:
		return
	default:
	}
	syscall.Kill(-j.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-j.done:
	case <-time.After(30 * time.Second):
		t.Errorf("%s (pid %d) did not end within 30s of SIGKILL", j.name, j.cmd.Process.Pid)
	}
}

func (j *jvm) tail() string {
	data, _ := os.ReadFile(j.log)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	return strings.Join(lines[max(0, len(lines)-30):], "\n")
}

// waitFor polls until ok or the JVM ends or the time is up.
func (j *jvm) waitFor(t *testing.T, what string, limit time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !ok() {
		select {
		case <-j.done:
			t.Fatalf("%s ended before %s:\n%s", j.name, what, j.tail())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no %s within %s:\n%s", j.name, what, limit, j.tail())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func answers(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		c.Close()
	}
	return err == nil
}

// startJobServer starts Beam's job server on a free loopback port (or port), with the JVM's
// environment env and the arguments of the script's jobserver after the port (the master,
// and Flink's configuration folder).
func (s *jobServerSetup) startJobServer(t *testing.T, port int, env []string, args ...string) (*jvm, string) {
	t.Helper()
	if port == 0 {
		port = freeTCPPort(t)
	}
	endpoint := fmt.Sprintf("127.0.0.1:%d", port)
	js := s.start(t, "job-server", env, append([]string{"jobserver", fmt.Sprint(port)}, args...)...)
	js.waitFor(t, "job service on "+endpoint, 2*time.Minute, func() bool { return answers(endpoint) })
	return js, endpoint
}

// flinkJobServerEnv is the environment of Flink's job server JVM: its heap.
var flinkJobServerEnv = []string{"FLINK_HEAP=768m"}

func writeFlinkConf(t *testing.T, dir string, lines ...string) string {
	t.Helper()
	testfiles.WriteFile(t, filepath.Join(dir, "flink-conf.yaml"), []byte(strings.Join(lines, "\n")+"\n"))
	return dir
}

// runnerJob is a job run on a job server's runner (Flink, Spark) and on prism: the folder
// dataset (JPEG and PNG files with bad files among them) preprocessed as stored passes, as
// base images for online views and as evaluation shards, then embed, knn, linear and npc on
// prism's datasets and embeddings (each job's inputs are the same for both runners, so its
// outputs must be too).
type runnerJob struct {
	name string
	args []string // without --output (outDir adds it) and runner flags
	// output names what the job writes: a folder or file, compared byte for byte.
	output string
}

// writeBadFolder writes the folder dataset: perClass images in each of three classes and
// four bad files (two corrupt JPEGs, an empty file, text named .jpg).
func writeBadFolder(t *testing.T, dir string, perClass int) {
	t.Helper()
	pipelinetest.WriteFolder(t, dir, []string{"ant", "bee", "cat"}, perClass, 40, 32)
	testfiles.WriteFile(t, filepath.Join(dir, "ant", "zz-corrupt.jpg"), testfiles.CorruptJPEG(t))
	testfiles.WriteFile(t, filepath.Join(dir, "bee", "zz-corrupt.jpg"), testfiles.CorruptJPEG(t))
	testfiles.WriteFile(t, filepath.Join(dir, "cat", "zz-empty.jpg"), nil)
	testfiles.WriteFile(t, filepath.Join(dir, "cat", "zz-text.jpg"), []byte("not an image\n"))
}

// timingKey matches the JSON fields that say how long something took, or when and on what
// machine it ran (a reproduction's time, history file name and load average).
var timingKey = regexp.MustCompile(`(?i)(wall|seconds|elapsed|duration|_ms$|_s$|per_sec|_time|time_|^time$|^history_file$|^machine$)`)

// wallTime matches a Go duration after "wall", of one unit (412ms) or more (1m1.6s).
var wallTime = regexp.MustCompile(`wall ([0-9.]+[a-zµ]+)+`)

// normalJSON is a command's JSON output without its timing fields, with the given paths
// replaced by a placeholder.
func normalJSON(t *testing.T, out string, paths ...string) string {
	t.Helper()
	for _, p := range paths {
		out = strings.ReplaceAll(out, p, "OUT")
	}
	var v any
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &v); err != nil {
		return wallTime.ReplaceAllString(strings.TrimSpace(out), "wall T") // preprocess's summary line
	}
	var strip func(any) any
	strip = func(v any) any {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if timingKey.MatchString(k) {
					delete(x, k)
				} else {
					x[k] = strip(e)
				}
			}
		case []any:
			for i := range x {
				x[i] = strip(x[i])
			}
		}
		return v
	}
	b, _ := json.Marshal(strip(v))
	return string(b)
}

// checksums is TreeChecksums of a folder, or the checksum of a single file.
func checksums(t *testing.T, p string) map[string]string {
	t.Helper()
	info, err := os.Stat(p)
	if err != nil {
		t.Fatalf("%v", err)
	}
	if info.IsDir() {
		return testfiles.TreeChecksums(t, p)
	}
	return testfiles.TreeChecksums(t, filepath.Dir(p))
}

// sameOutputs fails the test unless got (the runner's) and want (prism's) hold the same files
// with the same bytes.
func sameOutputs(t *testing.T, runner, what, want, got string) {
	t.Helper()
	w, g := checksums(t, want), checksums(t, got)
	if !maps.Equal(w, g) {
		var diff []string
		for _, k := range slices.Sorted(maps.Keys(w)) {
			if g[k] != w[k] {
				diff = append(diff, fmt.Sprintf("%s: %s %.12s, prism %.12s", k, runner, g[k], w[k]))
			}
		}
		for _, k := range slices.Sorted(maps.Keys(g)) {
			if _, ok := w[k]; !ok {
				diff = append(diff, k+": only on "+runner)
			}
		}
		t.Errorf("%s: %s wrote other bytes than prism:\n%s", what, runner, strings.Join(diff, "\n"))
		return
	}
	t.Logf("%s: %d files byte-identical to prism's", what, len(w))
}

// dcl runs a dcl command as a child process and fails the test when it fails.
func dcl(t *testing.T, timeout time.Duration, args ...string) string {
	t.Helper()
	start := time.Now()
	stdout, stderr, err := dclProcess(t, timeout, args...)
	if err != nil {
		t.Fatalf("dcl %s: %v after %s\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, time.Since(start).Round(time.Second), stdout, lastLines(stderr, 40))
	}
	return stdout
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// runnerFixture is the data of the tests on a runner (Flink, Spark) and prism's outputs for
// them, made once per test.
type runnerFixture struct {
	runner       string // the runner compared with prism, in messages
	folder, work string
	prism        map[string]string // job name → prism's output
	prismStdout  map[string]string
	jobs         []runnerJob
}

func newRunnerFixture(t *testing.T, runner string, perClass int) *runnerFixture {
	t.Helper()
	f := &runnerFixture{runner: runner, folder: t.TempDir(), work: t.TempDir(), prism: map[string]string{}, prismStdout: map[string]string{}}
	writeBadFolder(t, f.folder, perClass)
	common := []string{"--dataset=folder", "--input=" + f.folder, "--view-size=24", "--seed=3", "--unit-records=16", "--max-bad-fraction=0.1", "--progress=off"}
	pre := func(name string, extra ...string) runnerJob {
		return runnerJob{name: name, args: append(append([]string{"preprocess"}, common...), extra...)}
	}
	f.jobs = []runnerJob{
		pre("preprocess-stored", "--passes=2", "--shards=2"),
		pre("preprocess-online", "--views=online", "--shards=2"),
		pre("preprocess-eval", "--augment=none", "--shards=2"),
	}
	for _, j := range f.jobs {
		f.runPrism(t, j)
	}
	run := filepath.Join(f.work, "run")
	dcl(t, 5*time.Minute, "train", "--input", f.prism["preprocess-stored"], "--output", run, "--model", "mlp", "--width", "4",
		"--batch-size", "8", "--epochs", "1", "--lr", "0.1", "--backend", "cpu", "--temperature", "0.2", "--progress", "off")
	evalJobs := []runnerJob{
		{name: "embed-train", args: []string{"embed", "--checkpoint", run, "--input", f.prism["preprocess-eval"], "--parts", "2", "--progress", "off"}},
		{name: "embed-pairs", args: []string{"embed", "--checkpoint", run, "--input", f.prism["preprocess-stored"], "--feature", "projection", "--views", "2", "--progress", "off"}},
	}
	for _, j := range evalJobs {
		f.runPrism(t, j)
	}
	train := f.prism["embed-train"]
	evalJobs = append(evalJobs,
		runnerJob{name: "knn", args: []string{"knn", "--train", train, "--test", train, "--k", "5", "--per-class"}},
		runnerJob{name: "linear", args: []string{"linear", "--train", train, "--test", train, "--probe-epochs", "3", "--batch-size", "4", "--lr", "0.5"}},
		runnerJob{name: "npc", args: []string{"npc", "--input", f.prism["embed-pairs"], "--batch-sizes", "4,8"}, output: "npc"},
	)
	for _, j := range evalJobs[2:] {
		f.runPrism(t, j)
	}
	f.jobs = append(f.jobs, evalJobs...)
	return f
}

// outArgs are the output flags of job j writing under dir, and what it writes.
func outArgs(j runnerJob, dir string) ([]string, string) {
	switch j.name {
	case "knn", "linear":
		return nil, "" // JSON on stdout only
	}
	out := filepath.Join(dir, j.name)
	return []string{"--output=" + out}, out
}

func (f *runnerFixture) runPrism(t *testing.T, j runnerJob) {
	t.Helper()
	extra, out := outArgs(j, filepath.Join(f.work, "prism"))
	f.prismStdout[j.name] = dcl(t, 5*time.Minute, append(append([]string{}, j.args...), extra...)...)
	f.prism[j.name] = out
}

// compare runs job j with runner flags under dir and compares its outputs with prism's.
func (f *runnerFixture) compare(t *testing.T, j runnerJob, dir string, flags []string, timeout time.Duration) {
	t.Helper()
	extra, out := outArgs(j, dir)
	start := time.Now()
	stdout := dcl(t, timeout, append(append(append([]string{}, j.args...), extra...), flags...)...)
	t.Logf("%s on %s: %s", j.name, f.runner, time.Since(start).Round(100*time.Millisecond))
	f.check(t, j, out, stdout)
}

func (f *runnerFixture) check(t *testing.T, j runnerJob, out, stdout string) {
	t.Helper()
	if out != "" {
		sameOutputs(t, f.runner, j.name, f.prism[j.name], out)
	}
	got, want := normalJSON(t, stdout, out), normalJSON(t, f.prismStdout[j.name], f.prism[j.name])
	if got != want {
		t.Errorf("%s printed, without timings:\n%s\nprism:\n%s", j.name, got, want)
	}
}

// TestFlinkEmbedded runs every job on the job server's embedded Flink (parallelism 2).
func TestFlinkEmbedded(t *testing.T) {
	s := needFlink(t)
	f := newRunnerFixture(t, s.name, 40)
	conf := writeFlinkConf(t, t.TempDir(), "parallelism.default: 2", "taskmanager.numberOfTaskSlots: 2")
	_, endpoint := s.startJobServer(t, 0, flinkJobServerEnv, "[local]", conf)
	flags := s.runnerFlags(endpoint)
	dir := t.TempDir()
	for _, j := range f.jobs {
		t.Run(j.name, func(t *testing.T) { f.compare(t, j, dir, flags, 5*time.Minute) })
	}
	t.Run("reproduce", func(t *testing.T) {
		// One output folder for both (sameBeamOutputs): prism's is moved aside first.
		config := nightly(t)(1)
		out, prismOut := filepath.Join(dir, "reproduce"), filepath.Join(dir, "reproduce-prism")
		args := []string{"reproduce", "--config=" + config, "--output=" + out, "--log-level=warn", "--progress=off"}
		dcl(t, 10*time.Minute, args...)
		moveAside(t, out, prismOut)
		start, workers := time.Now(), countLines(t, s.bootLog)
		dcl(t, 10*time.Minute, append(args, flags...)...)
		workers = countLines(t, s.bootLog) - workers
		t.Logf("reproduce with its Beam stages on Flink: %s, %d workers started", time.Since(start).Round(100*time.Millisecond), workers)
		if workers == 0 {
			t.Error("reproduce started no worker on Flink: its Beam stages ran elsewhere")
		}
		sameBeamOutputs(t, prismOut, out)
	})
	s.checkWorkers(t)
}

// checkWorkers fails the test unless boot started workers, and left no copy of the worker
// binary behind.
func (s *jobServerSetup) checkWorkers(t *testing.T) {
	t.Helper()
	if n := countLines(t, s.bootLog); n == 0 {
		t.Error("no worker was started through boot")
	} else {
		t.Logf("%d workers started through boot", n)
	}
	if left := s.bootCopies(t); len(left) > 0 {
		t.Errorf("boot's copies of the worker binary were left behind: %v", left)
	}
}

// bootCopies removes, and returns, the copies of the worker binary that Beam's boot loader
// left under /tmp/bin*/ since the test started (the worker removes the one it was started
// from; a worker killed while boot copied it leaves part of one). A copy is a folder made
// since the test started that holds a file named worker and nothing else, whose bytes begin
// the worker binary's.
func (s *jobServerSetup) bootCopies(t *testing.T) []string {
	t.Helper()
	want, err := os.ReadFile(s.worker)
	if err != nil {
		t.Fatal(err)
	}
	dirs, _ := filepath.Glob("/tmp/bin*")
	var left []string
	for _, d := range dirs {
		info, err := os.Stat(d)
		entries, _ := os.ReadDir(d)
		if err != nil || !info.IsDir() || info.ModTime().Before(s.started) || len(entries) != 1 || entries[0].Name() != "worker" {
			continue
		}
		got, err := os.ReadFile(filepath.Join(d, "worker"))
		if err != nil || len(got) > len(want) || !bytes.Equal(got, want[:len(got)]) {
			continue
		}
		os.RemoveAll(d)
		left = append(left, fmt.Sprintf("%s (%d of %d bytes)", d, len(got), len(want)))
	}
	return left
}

func countLines(t *testing.T, p string) int {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		return 0
	}
	defer f.Close()
	n := 0
	for sc := bufio.NewScanner(f); sc.Scan(); {
		n++
	}
	return n
}

// flinkCluster is a standalone Flink session cluster on loopback: a JobManager and
// TaskManagers as JVMs of their own, started from the same jars as the job server.
type flinkCluster struct {
	t        *testing.T // the test the cluster lives as long as
	s        *jobServerSetup
	conf     string
	restAddr string // host:port of the REST API
	managers map[string]*jvm
}

// The TaskManagers' memory, set out in full as Flink's own scripts would derive it; their
// JVMs' limits (scripts/flink.sh taskmanager) match: heap 64+320 MiB, direct 64+512+64 MiB.
// The worker binary reaches each worker through the TaskManager's direct memory, whole.
var taskManagerMemory = []string{
	"taskmanager.cpu.cores: 1",
	"taskmanager.memory.framework.heap.size: 64m",
	"taskmanager.memory.task.heap.size: 320m",
	"taskmanager.memory.managed.size: 128m",
	"taskmanager.memory.framework.off-heap.size: 64m",
	"taskmanager.memory.task.off-heap.size: 512m",
	"taskmanager.memory.network.min: 64m",
	"taskmanager.memory.network.max: 64m",
	"taskmanager.memory.jvm-metaspace.size: 256m",
	"taskmanager.memory.jvm-overhead.min: 64m",
	"taskmanager.memory.jvm-overhead.max: 64m",
}

func startFlinkCluster(t *testing.T, s *jobServerSetup, taskManagers int) *flinkCluster {
	t.Helper()
	rpc, rest := freeTCPPort(t), freeTCPPort(t)
	lines := append([]string{
		"jobmanager.rpc.address: 127.0.0.1",
		"jobmanager.bind-host: 127.0.0.1",
		fmt.Sprintf("jobmanager.rpc.port: %d", rpc),
		"jobmanager.memory.process.size: 768m",
		"rest.address: 127.0.0.1",
		"rest.bind-address: 127.0.0.1",
		fmt.Sprintf("rest.port: %d", rest),
		"taskmanager.host: 127.0.0.1",
		"taskmanager.bind-host: 127.0.0.1",
		"taskmanager.numberOfTaskSlots: 1",
		"parallelism.default: 2",
		// A lost TaskManager fails the tasks it ran; the job restarts them on the others.
		"restart-strategy.type: fixed-delay",
		"restart-strategy.fixed-delay.attempts: 5",
		"restart-strategy.fixed-delay.delay: 2 s",
		"heartbeat.interval: 2000",
		"heartbeat.timeout: 10000",
	}, taskManagerMemory...)
	c := &flinkCluster{t: t, s: s, conf: writeFlinkConf(t, t.TempDir(), lines...), restAddr: fmt.Sprintf("127.0.0.1:%d", rest), managers: map[string]*jvm{}}
	jm := s.start(t, "jobmanager", []string{"FLINK_HEAP=512m"}, "jobmanager", c.conf)
	jm.waitFor(t, "REST API on "+c.restAddr, 2*time.Minute, func() bool { return answers(c.restAddr) })
	for i := range taskManagers {
		c.addTaskManager(fmt.Sprintf("tm%d", i+1))
	}
	jm.waitFor(t, fmt.Sprintf("%d TaskManagers", taskManagers), 2*time.Minute, func() bool { return c.overview(t).TaskManagers == taskManagers })
	o := c.overview(t)
	t.Logf("standalone Flink %s session cluster at %s: %d TaskManagers, %d slots", o.Version, c.restAddr, o.TaskManagers, o.Slots)
	return c
}

// addTaskManager starts a TaskManager that lives as long as the cluster (not as long as the
// subtest that starts it, which would take it down at its end and leave later jobs short of
// slots).
func (c *flinkCluster) addTaskManager(id string) {
	c.managers[id] = c.s.start(c.t, id, []string{"FLINK_HEAP=384m", "FLINK_DIRECT=640m"}, "taskmanager", c.conf, id)
}

type clusterOverview struct {
	TaskManagers int    `json:"taskmanagers"`
	Slots        int    `json:"slots-total"`
	Version      string `json:"flink-version"`
}

// overview is the cluster's overview, or zeros while it does not answer.
func (c *flinkCluster) overview(t *testing.T) clusterOverview {
	var o clusterOverview
	resp, err := http.Get("http://" + c.restAddr + "/overview")
	if err != nil {
		return o
	}
	defer resp.Body.Close()
	json.NewDecoder(resp.Body).Decode(&o)
	return o
}

// rest calls the cluster's REST API and decodes its answer into v (unless nil).
func (c *flinkCluster) rest(t *testing.T, method, path string, v any) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+c.restAddr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	client := http.Client{Timeout: 10 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("Flink's REST API: %s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		t.Fatalf("Flink's REST API: %s %s: %s %s", method, path, resp.Status, body)
	}
	if v != nil {
		if err := json.Unmarshal(body, v); err != nil {
			t.Fatalf("Flink's REST API: %s %s: %v: %s", method, path, err, body)
		}
	}
}

// whenWorkerStarts waits until boot has started a worker more than before (the job is under
// way on the TaskManagers) and a moment more, then calls act.
func (s *jobServerSetup) whenWorkerStarts(t *testing.T, before int, act func()) chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		deadline := time.Now().Add(3 * time.Minute)
		for countLines(t, s.bootLog) <= before && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(2 * time.Second)
		act()
	}()
	return done
}

// TestFlinkCluster runs the jobs on a standalone session cluster of two TaskManagers, loses a
// TaskManager (SIGKILL, with the workers it started) in the middle of a preprocess and of an
// embed, and loses the job server in the middle of a job: every run that completes, first
// time or run again, writes what prism writes.
func TestFlinkCluster(t *testing.T) {
	s := needFlink(t)
	f := newRunnerFixture(t, s.name, 80)
	c := startFlinkCluster(t, s, 2)
	jsPort := freeTCPPort(t)
	js, endpoint := s.startJobServer(t, jsPort, flinkJobServerEnv, c.restAddr, c.conf)
	flags := s.runnerFlags(endpoint)
	dir := t.TempDir()
	jobs := map[string]runnerJob{}
	for _, j := range f.jobs {
		jobs[j.name] = j
	}
	for _, name := range []string{"preprocess-stored", "preprocess-online", "embed-train", "knn"} {
		t.Run(name, func(t *testing.T) { f.compare(t, jobs[name], dir, flags, 5*time.Minute) })
	}

	// A lost TaskManager: its tasks fail, Flink restarts them on the others (a third one
	// joins, as a cluster manager would start one), and the job completes.
	tm := 2
	for _, name := range []string{"preprocess-stored", "embed-train"} {
		t.Run(name+"-taskmanager-killed", func(t *testing.T) {
			j := jobs[name]
			out := filepath.Join(t.TempDir(), j.name)
			args := append(append(append([]string{}, j.args...), "--output="+out), flags...)
			victim, replacement := fmt.Sprintf("tm%d", tm), fmt.Sprintf("tm%d", tm+1)
			tm++
			killed := s.whenWorkerStarts(t, countLines(t, s.bootLog), func() {
				c.managers[victim].kill(t)
				c.addTaskManager(replacement)
				t.Logf("killed TaskManager %s (SIGKILL, with its workers); %s joins", victim, replacement)
			})
			start := time.Now()
			stdout, stderr, err := dclProcess(t, 8*time.Minute, args...)
			<-killed
			if err != nil {
				t.Logf("the job failed after %s once its TaskManager was lost (%v): %s; running it again",
					time.Since(start).Round(time.Second), err, lastLines(stderr, 3))
				stdout = dcl(t, 8*time.Minute, args...)
			} else {
				t.Logf("the job completed in %s despite the lost TaskManager", time.Since(start).Round(time.Second))
			}
			f.check(t, j, out, stdout)
		})
	}

	// The job server lost: the run fails at once, naming it; the job goes on on the cluster
	// without it (Flink runs what it was given), so it is cancelled there, as the error says,
	// before the same command runs again against a job server started at the same address.
	t.Run("job-server-killed", func(t *testing.T) {
		j := jobs["preprocess-stored"]
		out := filepath.Join(t.TempDir(), j.name)
		args := append(append(append([]string{}, j.args...), "--output="+out), flags...)
		var killedAt time.Time
		killed := s.whenWorkerStarts(t, countLines(t, s.bootLog), func() { js.kill(t); killedAt = time.Now() })
		_, stderr, err := dclProcess(t, 5*time.Minute, args...)
		<-killed
		took := time.Since(killedAt)
		if err == nil {
			t.Fatal("the job completed although its job server was killed")
		}
		want := "the job server at " + endpoint + " (--endpoint) was lost while the preprocess pipeline ran"
		if !strings.Contains(stderr, want) || took > time.Minute {
			t.Errorf("after the job server died: %v %s later, stderr %q; want a failure saying %q within 1m", err, took.Round(time.Second), lastLines(stderr, 5), want)
		} else {
			t.Logf("the run failed %s after the job server died: %s", took.Round(100*time.Millisecond), lastLines(stderr, 1))
		}
		if n := c.cancelRunningJobs(t); n == 0 {
			t.Log("no job of the lost job server was left running on the cluster")
		} else {
			t.Logf("cancelled the %d job(s) the lost job server left running on the cluster", n)
		}
		_, endpoint = s.startJobServer(t, jsPort, flinkJobServerEnv, c.restAddr, c.conf)
		stdout := dcl(t, 5*time.Minute, args...)
		f.check(t, j, out, stdout)
	})

	// Only a worker killed with its TaskManager while boot copied it leaves a copy (part of
	// one): at most one per kill.
	if left := s.bootCopies(t); len(left) > 2 {
		t.Errorf("boot's copies of the worker binary were left behind: %v", left)
	} else if len(left) > 0 {
		t.Logf("removed what boot was copying when its TaskManager was killed: %v", left)
	}
}

// cancelRunningJobs cancels every job on the cluster that has not ended (Flink's REST API:
// PATCH /jobs/ID?mode=cancel) and waits until each has; it returns how many there were.
func (c *flinkCluster) cancelRunningJobs(t *testing.T) int {
	t.Helper()
	running := func() []string {
		var overview struct {
			Jobs []struct {
				ID    string `json:"jid"`
				State string `json:"state"`
			} `json:"jobs"`
		}
		c.rest(t, http.MethodGet, "/jobs/overview", &overview)
		var ids []string
		for _, j := range overview.Jobs {
			switch j.State {
			case "FINISHED", "FAILED", "CANCELED":
			default:
				ids = append(ids, j.ID)
			}
		}
		return ids
	}
	ids := running()
	for _, id := range ids {
		c.rest(t, http.MethodPatch, "/jobs/"+id+"?mode=cancel", nil)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for len(running()) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the cluster's jobs %v were not cancelled within 2m", running())
		}
		time.Sleep(500 * time.Millisecond)
	}
	return len(ids)
}

// reproduceBeamOutputs are what the Beam stages of the reproduction (nightlyConfig) write:
// its three datasets (preprocess), the trained encoder's embeddings (embed) and its k-NN
// result (knn), and the results they go into. Each pattern must match in prism's output.
var reproduceBeamOutputs = []string{
	"data/pretrain/manifest.json", "data/pretrain/pass-*/*.parquet",
	"data/eval-train/manifest.json", "data/eval-train/pass-*/*.parquet",
	"data/eval-test/manifest.json", "data/eval-test/pass-*/*.parquet",
	"runs/dcl/embeddings/train/embeddings.json", "runs/dcl/embeddings/train/*.parquet",
	"runs/dcl/embeddings/test/embeddings.json", "runs/dcl/embeddings/test/*.parquet",
	"runs/dcl/knn.json",
	"results.json",
}

// sameBeamOutputs compares what the Beam stages of two reproductions (want: prism's, got:
// the runner's) wrote (reproduceBeamOutputs): the same files on both sides, byte for byte,
// but for embeddings.json and results.json, compared as JSON without timings. Both must have
// been written at one path, the first moved aside before the second ran (moveAside): the
// embeddings' metadata names the checkpoint they were made from, which is under the output
// folder, so two folders' embeddings differ in those bytes whatever runs them.
func sameBeamOutputs(t *testing.T, want, got string) {
	t.Helper()
	n := 0
	for _, pattern := range reproduceBeamOutputs {
		w, _ := filepath.Glob(filepath.Join(want, pattern))
		g, _ := filepath.Glob(filepath.Join(got, pattern))
		if len(w) == 0 {
			t.Errorf("reproduce: prism wrote no %s", pattern)
			continue
		}
		rel := func(root string, paths []string) []string {
			out := make([]string, len(paths))
			for i, p := range paths {
				out[i], _ = filepath.Rel(root, p)
			}
			return out
		}
		if wr, gr := rel(want, w), rel(got, g); !slices.Equal(wr, gr) {
			t.Errorf("reproduce: %s is %q in %s, %q in prism's %s", pattern, gr, got, wr, want)
			continue
		}
		for _, wp := range w {
			name, _ := filepath.Rel(want, wp)
			a, errA := os.ReadFile(wp)
			b, errB := os.ReadFile(filepath.Join(got, name))
			if errA != nil || errB != nil {
				t.Fatalf("reproduce: %v %v", errA, errB)
			}
			switch filepath.Base(name) {
			case "embeddings.json", "results.json":
				if x, y := normalJSON(t, string(b)), normalJSON(t, string(a)); x != y {
					t.Errorf("reproduce: %s without timings differs from prism's:\n%s\nprism:\n%s", name, x, y)
					continue
				}
			default:
				if !bytes.Equal(a, b) {
					t.Errorf("reproduce: %s differs from prism's (%d bytes, prism %d; sha256 %.12x, prism %.12x)", name, len(b), len(a), sha256.Sum256(b), sha256.Sum256(a))
					continue
				}
			}
			n++
		}
	}
	t.Logf("reproduce: %d outputs of its Beam stages identical to prism's", n)
}

// moveAside renames the folder from to to, where a second run cannot touch it.
func moveAside(t *testing.T, from, to string) {
	t.Helper()
	if err := os.Rename(from, to); err != nil {
		t.Fatal(err)
	}
}
