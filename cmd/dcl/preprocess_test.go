package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dcl-beam/dcl-beam/internal/testing/testfiles"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners/prism"

	"github.com/dcl-beam/dcl-beam/internal/testing/fashionmnist"
	"github.com/dcl-beam/dcl-beam/internal/testing/pipelinetest"
	"github.com/dcl-beam/dcl-beam/shards"
)

// runPreprocessInProcess runs `dcl preprocess` through run, on prism in process. Beam's
// flags are process-wide: the runner is named, and restored afterwards, so that no other
// test's flags leak in or out.
func runPreprocessInProcess(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	runner := flag.CommandLine.Lookup("runner")
	old := runner.Value.String()
	t.Cleanup(func() { runner.Value.Set(old) })
	return runDCL(append([]string{"preprocess", "--runner=prism"}, args...)...)
}

// TestPreprocessCommandOnFashionMNIST: `dcl preprocess --dataset=idx` on the real
// Fashion-MNIST files, then `dcl shards verify`: ok, with the labels of the test split's
// first 2,000 images (counted here from the IDX labels file).
func TestPreprocessCommandOnFashionMNIST(t *testing.T) {
	dir := fashionmnist.Dir(t)
	out := filepath.Join(t.TempDir(), "fm")
	code, stdout, stderr := runPreprocessInProcess(t, "--dataset=idx", "--input="+dir, "--split=test",
		"--output="+out, "--limit=2000", "--passes=2", "--seed=3")
	if code != exitOK {
		t.Fatalf("dcl preprocess exited %d:\n%s", code, stderr)
	}
	if !strings.Contains(stdout, "idx test: 2000 records → 4000 rows (8000 views) in 2 shards") || strings.Count(stdout, "\n") != 1 {
		t.Errorf("summary %q", stdout)
	}
	code, stdout, stderr = runDCL("shards", "verify", out)
	if code != exitOK {
		t.Fatalf("dcl shards verify exited %d: %s %s", code, stdout, stderr)
	}
	var sum shards.Summary
	if err := json.Unmarshal([]byte(stdout), &sum); err != nil {
		t.Fatal(err)
	}
	want := map[int32]int64{}
	for _, l := range fashionmnist.Load(t, "test", 2000).Labels {
		want[int32(l)] += 2 // two passes
	}
	if !sum.OK || sum.Rows != 4000 || sum.Views != 8000 || !maps.Equal(sum.Labels, want) {
		t.Errorf("verify: %+v; want ok, 4000 rows, 8000 views, labels %v", sum, want)
	}
}

func TestPreprocessCommandLineErrorsExit2(t *testing.T) {
	in := t.TempDir()
	base := []string{"--dataset=cifar10", "--input=" + in, "--output=" + filepath.Join(t.TempDir(), "out")}
	tests := []struct {
		give []string
		want string
	}{
		{[]string{"--dataset=cifar10"}, "--dataset, --input and --output are required"},
		{[]string{"--dataset=svhn", "--input=x", "--output=y"}, `--dataset="svhn": want one of cifar10`},
		{append(base, "--augment=simclr-mnist"), "unknown augmentation preset"},
		{append(base, "--augment=none", "--passes=3"), "--augment=none writes evaluation shards"},
		{append(base, "--passes=0"), "--passes=0"},
		{append(base, "--encoding=gif"), `encoding "gif"`},
		{append(base, "--size=32", "--view-size=28"), "--size=32 and --view-size=28 disagree"},
		{append(base, "--flip-p=2"), "--flip-p=2: a probability must be in [0, 1]"},
		{append(base, "--crop-scale=0.5"), "crop-scale"},
		{append(base, "--channels=2"), "--channels=2"},
		{append(base, "--max-bad-fraction=1.5"), "--max-bad-fraction=1.5"},
		{append(base, "--shards=-1"), "--shards=-1"},
		{append(base, "--progress=maybe"), `--progress="maybe"`},
		{append(base, "extra"), "takes no positional arguments"},
		{[]string{"--dataset=idx", "--input=" + in, "--output=" + filepath.Join(t.TempDir(), "o"), "--split=val"}, `--split=val: idx has no split "val"; want one of train, test`},
	}
	for _, tt := range tests {
		code, _, stderr := runDCL(append([]string{"preprocess"}, tt.give...)...)
		if code != exitUsage || !strings.Contains(stderr, tt.want) {
			t.Errorf("dcl preprocess %q = %d, %q; want exit 2 mentioning %q", tt.give, code, stderr, tt.want)
		}
		if strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("dcl preprocess %q printed more than one line:\n%s", tt.give, stderr)
		}
	}
}

// TestPreprocessCommandBadInput: input that cannot be preprocessed fails (exit 1) with one
// line that says why and where.
func TestPreprocessCommandBadInput(t *testing.T) {
	in := t.TempDir()
	files := pipelinetest.WriteFolder(t, in, []string{"a", "b"}, 3, 20, 20)
	testfiles.WriteFile(t, files["b"][1], testfiles.CorruptJPEG(t))
	out := filepath.Join(t.TempDir(), "out")
	folder := []string{"--dataset=folder", "--input=" + in, "--output=" + out, "--size=16"}

	glob := filepath.Join(t.TempDir(), "data_batch_*.bin")
	tests := []struct {
		name string
		give []string
		want []string
	}{
		{"empty glob", []string{"--dataset=cifar10", "--input=" + glob, "--output=" + out}, []string{glob, "matches no files"}},
		{"missing files", []string{"--dataset=stl10", "--input=" + in, "--output=" + out}, []string{"train_X.bin"}},
		{"missing input", []string{"--dataset=idx", "--input=" + filepath.Join(in, "nonexistent"), "--output=" + out}, []string{"input " + filepath.Join(in, "nonexistent") + " does not exist"}},
		{"corrupt JPEG", folder, []string{"1 of 6 records", "--max-bad-fraction=0", shards.DeadLettersName, "no manifest"}},
	}
	for _, tt := range tests {
		// Without progress lines (a log's, as stderr is no terminal) the error is all there is.
		code, _, stderr := runPreprocessInProcess(t, append(tt.give, "--progress=off")...)
		if code != exitError {
			t.Errorf("%s: exit %d, want 1:\n%s", tt.name, code, stderr)
		}
		for _, w := range tt.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%s: %q does not mention %q", tt.name, stderr, w)
			}
		}
		if lines := strings.Count(strings.TrimSpace(stderr), "\n") + 1; lines != 1 {
			t.Errorf("%s: %d lines on stderr, want 1:\n%s", tt.name, lines, stderr)
		}
	}

	code, stdout, stderr := runPreprocessInProcess(t, append(folder, "--max-bad-fraction=0.5")...)
	if code != exitOK || !strings.Contains(stdout, "6 records → 5 rows (10 views) in 1 shards") || !strings.Contains(stdout, "1 dead letters") {
		t.Fatalf("with --max-bad-fraction=0.5: exit %d, %q, %s", code, stdout, stderr)
	}
	code, _, stderr = runPreprocessInProcess(t, append(folder, "--max-bad-fraction=0.5", "--seed=2")...)
	if code != exitError || !strings.Contains(stderr, "already holds a different dataset (manifest.json differs: seed: 1 != 2)") {
		t.Errorf("another seed into the same output: exit %d, %s", code, stderr)
	}
	code, _, stderr = runPreprocessInProcess(t, append(folder, "--max-bad-fraction=0.5", "--seed=2", "--overwrite")...)
	if code != exitOK {
		t.Errorf("--overwrite: exit %d, %s", code, stderr)
	}
}

// TestPreprocessRefusesACorruptGzipUnderLimit: one byte flipped in the middle of a copy of
// Fashion-MNIST's training images decodes into garbage pixels without a deflate error; with
// --limit the records read end long before gzip's checksum. The run must fail, naming the
// file and the checksum, and write no manifest.
func TestPreprocessRefusesACorruptGzipUnderLimit(t *testing.T) {
	src := fashionmnist.Dir(t)
	in := t.TempDir()
	for _, name := range []string{"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"} {
		data, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(name, "train-images") {
			data[len(data)/2] ^= 0x10
		}
		testfiles.WriteFile(t, filepath.Join(in, name), data)
	}
	out := filepath.Join(t.TempDir(), "fm")
	code, _, stderr := runPreprocessInProcess(t, "--dataset=fashion-mnist", "--input="+in, "--output="+out, "--limit=100")
	if code != exitError || !strings.Contains(stderr, "train-images-idx3-ubyte.gz: corrupt gzip stream: its CRC-32 does not match") {
		t.Errorf("exit %d, %q; want 1 and the checksum error naming the file", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(out, shards.ManifestName)); !os.IsNotExist(err) {
		t.Errorf("a manifest was written: %v", err)
	}
}

// dclProcess runs this test binary as dcl (see TestMain) in a child process, as a user or a
// runner would start the dcl binary.
func dclProcess(t *testing.T, timeout time.Duration, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Env = append(os.Environ(), "DCL_TEST_AS_MAIN=1")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// bootWrapper is Beam's boot loader behind a script that works around prism v2.77.0
// passing --id='X' with literal quotes to PROCESS environments (exec without a shell), and
// keeps boot's staging folder, its output and the pipeline_options.json it writes in its
// working folder inside the test's folder. The script records each start.
const bootWrapper = `#!/bin/sh
echo "$$ $*" >> %[1]q
for a in "$@"; do
  case "$a" in
    --id=\'*\') a="--id=$(echo "$a" | sed "s/^--id='\(.*\)'$/\1/")";;
  esac
  set -- "$@" "$a"; shift
done
cd %[3]q || exit 1
exec %[2]q --semi_persist_dir=%[3]q "$@" >> %[4]q 2>&1
`

// TestPreprocessRunners runs the same small job through every runner the README names and
// checks that each writes the same bytes: prism in a child process (the reference), the
// direct runner, a portable job server (prism's, on loopback) with LOOPBACK workers and
// with PROCESS workers started by Beam's boot loader from the staged dcl binary (the
// path of Dataflow's and Flink's containers), and a Dataflow dry run that only translates.
func TestPreprocessRunners(t *testing.T) {
	if testing.Short() {
		t.Skip("starts child processes and builds Beam's boot loader")
	}
	in := t.TempDir()
	pipelinetest.WriteCIFAR10(t, in, 4)
	job := []string{"preprocess", "--dataset=cifar10", "--input=" + in, "--passes=2", "--shards=2", "--unit-records=6", "--seed=5"}
	root := t.TempDir()
	outputs := map[string]string{}
	run := func(name string, args ...string) {
		t.Helper()
		out := filepath.Join(root, name)
		stdout, stderr, err := dclProcess(t, 3*time.Minute, append(append(job, "--output="+out), args...)...)
		if err != nil {
			t.Fatalf("%s: %v\nstdout: %s\nstderr: %s", name, err, stdout, stderr)
		}
		if !strings.Contains(stdout, "20 records → 40 rows (80 views) in 4 shards") {
			t.Errorf("%s: summary %q", name, stdout)
		}
		if _, err := shards.Verify(context.Background(), out); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		outputs[name] = out
	}

	t.Run("prism", func(t *testing.T) { run("prism") })
	t.Run("direct", func(t *testing.T) { run("direct", "--runner=direct") })

	port := freeTCPPort(t)
	if _, err := prism.CreateJobServer(context.Background(), prism.Options{Port: port}); err != nil {
		t.Fatalf("starting prism's job server on port %d: %v", port, err)
	}
	endpoint := fmt.Sprintf("localhost:%d", port)
	t.Run("universal-loopback", func(t *testing.T) {
		run("universal-loopback", "--runner=universal", "--endpoint="+endpoint, "--environment_type=LOOPBACK")
	})
	t.Run("universal-process-boot", func(t *testing.T) {
		dir := t.TempDir()
		boot := filepath.Join(dir, "boot")
		build := exec.Command("go", append([]string{"build"}, append(raceFlags, "-o", boot, "github.com/apache/beam/sdks/v2/go/container")...)...)
		if msg, err := build.CombinedOutput(); err != nil {
			t.Fatalf("building Beam's boot loader: %v\n%s", err, msg)
		}
		starts := filepath.Join(dir, "starts.log")
		staging := filepath.Join(dir, "staging")
		if err := os.Mkdir(staging, 0o755); err != nil {
			t.Fatal(err)
		}
		wrapper := filepath.Join(dir, "bootwrap.sh")
		testfiles.WriteFile(t, wrapper, fmt.Appendf(nil, bootWrapper, starts, boot, staging, filepath.Join(dir, "boot.log")))
		if err := os.Chmod(wrapper, 0o755); err != nil {
			t.Fatal(err)
		}
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		// The worker is this test binary, staged by the runner and started by boot with
		// --worker: DCL_TEST_AS_MAIN, inherited through the job server and boot, makes it
		// run dcl's main, which hands a --worker start to the Beam harness.
		t.Setenv("DCL_TEST_AS_MAIN", "1")
		envConfig, _ := json.Marshal(map[string]string{"command": wrapper})
		run("universal-process-boot", "--runner=universal", "--endpoint="+endpoint, "--environment_type=PROCESS",
			"--environment_config="+string(envConfig), "--worker_binary="+exe)
		log, err := os.ReadFile(starts)
		if err != nil || !strings.Contains(string(log), "--provision_endpoint=") {
			t.Errorf("the job server never started a worker through boot (%v): %q", err, log)
		}
		bootLog, _ := os.ReadFile(filepath.Join(dir, "boot.log"))
		if !strings.Contains(string(bootLog), "go_worker_binary") {
			t.Errorf("boot did not fetch the staged worker binary; its log:\n%s", bootLog)
		}
	})

	t.Run("same bytes everywhere", func(t *testing.T) {
		want := testfiles.TreeChecksums(t, outputs["prism"])
		for name, out := range outputs {
			got := testfiles.TreeChecksums(t, out)
			if !maps.Equal(got, want) {
				t.Errorf("%s wrote other bytes than prism: %v, want %v", name, got, want)
			}
		}
	})

	t.Run("dataflow-dry-run", func(t *testing.T) {
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		stdout, stderr, err := dclProcess(t, time.Minute, append(job, "--output=gs://dcl-test-bucket/cifar10",
			"--runner=dataflow", "--dry_run", "--project=test-project", "--region=us-central1",
			"--staging_location=gs://dcl-test-bucket/staging", "--temp_location=gs://dcl-test-bucket/tmp",
			"--worker_binary="+exe)...)
		if err != nil {
			t.Fatalf("dataflow dry run: %v\n%s\n%s", err, stdout, stderr)
		}
		// The translated job is the command's output, on stdout at the default log level
		// (the README says --dry_run prints it); the summary is on stderr.
		// A portable (runner v2) job names no steps: its pipeline is the staged proto.
		var translated struct {
			Name        string         `json:"name"`
			Type        string         `json:"type"`
			ProjectID   string         `json:"projectId"`
			Environment map[string]any `json:"environment"`
		}
		if err := json.Unmarshal([]byte(stdout), &translated); err != nil || translated.Type != "JOB_TYPE_BATCH" ||
			translated.ProjectID != "test-project" || translated.Environment == nil {
			t.Errorf("stdout is not the translated Dataflow job (%v):\n%.500s\nstderr: %s", err, stdout, stderr)
		}
		if !strings.Contains(stderr, "dry run: the job was translated, not submitted") {
			t.Errorf("dry run summary not on stderr: %q", stderr)
		}
	})
}

func freeTCPPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
