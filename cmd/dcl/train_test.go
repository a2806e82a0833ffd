package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/reproduce"
	"github.com/dcl-beam/dcl-beam/shards"
	"github.com/dcl-beam/dcl-beam/trainstep"
	"github.com/dcl-beam/dcl-beam/transforms"
)

// writeTrainShards writes n view pairs of size×size grayscale images (views: 2) or n labelled
// images (views: 1) in one pass of one shard.
func writeTrainShards(t *testing.T, dir string, n, size, views int) {
	t.Helper()
	ctx := context.Background()
	cfg := shards.Config{
		Dataset: "fashion-mnist", Split: "train", Preset: "test", Augment: json.RawMessage(`{}`),
		Seed: 1, Passes: 1, Parts: 1, Views: views, Encoding: shards.Raw, Height: size, Width: size, Channels: 1,
		CodeVersion: "test", SourceChecksum: "sha256:00",
	}
	if err := shards.Prepare(ctx, dir, cfg, false); err != nil {
		t.Fatal(err)
	}
	w, err := shards.NewWriter(ctx, dir, shards.ShardID{Pass: 0, Part: 0, Parts: 1}, cfg, shards.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		v1, v2 := transforms.NewImage(size, size, 1), transforms.NewImage(size, size, 1)
		for p := range v1.Pix {
			v1.Pix[p], v2.Pix[p] = uint8(p*(i+1)+i%3*40), uint8(p*(i+1)+i%3*40+7)
		}
		if err := w.WriteViews(fmt.Sprintf("k%03d", i), int64(i), int32(i%3), v1, v2); err != nil {
			t.Fatal(err)
		}
	}
	info, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := shards.Commit(ctx, dir, cfg, []shards.ShardInfo{info}, int64(n), shards.DeadLetters{}); err != nil {
		t.Fatal(err)
	}
}

func TestTrainRunsAndResumes(t *testing.T) {
	data, eval, out := t.TempDir(), t.TempDir(), t.TempDir()
	writeTrainShards(t, data, 12, 8, 2)
	writeTrainShards(t, eval, 9, 8, 1)
	args := []string{"train", "--input", data, "--output", out, "--model", "mlp", "--width", "4", "--batch-size", "4",
		"--epochs", "2", "--lr", "0.1", "--backend", "cpu", "--knn-every", "1", "--knn-train", eval, "--json", "--max-steps", "4"}
	code, stdout, stderr := runDCL(args...)
	// stdout holds only the log's JSON lines; the closing summary goes to stderr.
	if code != exitOK || !strings.Contains(stderr, "train: stopped after 4 of 6 steps, 1 of 2 epochs completed") || strings.Contains(stdout, "train: ") {
		t.Fatalf("dcl train = %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	// --json copies the log to stdout; stderr (no terminal here) gets progress lines, no JSON.
	if !strings.Contains(stdout, `"knn_top1"`) || !strings.Contains(stdout, `"mean_q"`) {
		t.Errorf("stdout lacks the JSON log lines with kNN and mean q:\n%s", stdout)
	}
	if strings.Contains(stderr, `"mean_q"`) || !strings.Contains(stderr, "train: 4/6 steps") {
		t.Errorf("stderr has JSON, or lacks the progress line:\n%s", stderr)
	}
	resumed := append(args[:len(args)-2:len(args)-2], "--resume")
	code, stdout, stderr = runDCL(resumed...)
	if code != exitOK || !strings.Contains(stderr, "train: finished after 6 of 6 steps, 2 of 2 epochs completed") {
		t.Fatalf("dcl train --resume = %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	if _, err := os.Stat(filepath.Join(out, "summary.json")); err != nil {
		t.Error(err)
	}
	// Resuming with another model is a command-line error in one line.
	code, _, stderr = runDCL(append(resumed, "--model", "small-cnn")...)
	if code != exitUsage || !strings.Contains(stderr, "holds a mlp model, not small-cnn") || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
		t.Errorf("resume with another model = %d, %q", code, stderr)
	}
}

func TestTrainRejectsBadCommandLines(t *testing.T) {
	data, single := t.TempDir(), t.TempDir()
	writeTrainShards(t, data, 6, 8, 2)
	writeTrainShards(t, single, 6, 8, 1)
	base := []string{"train", "--input", data, "--output", t.TempDir(), "--backend", "cpu"}
	for _, tc := range []struct {
		give []string
		want string
	}{
		{[]string{"--batch-size", "1"}, "--batch-size=1: a contrastive batch"},
		{[]string{"--temperature", "0"}, "--temperature=0: must be a positive number"},
		{[]string{"--temperature", "-0.5"}, "--temperature=-0.5"},
		{[]string{"--loss", "triplet"}, `unknown loss "triplet"`},
		{[]string{"--method", "byol"}, `unknown training method "byol"`},
		{[]string{"--precision", "fp8"}, `precision "fp8"`},
		{[]string{"--model", "vgg"}, `unknown model "vgg"`},
		{[]string{"--optimizer", "adam"}, `unknown optimizer "adam"`},
		{[]string{"--reduction", "max"}, `unknown reduction "max"`},
		{[]string{"--loss", "dclw", "--sigma", "0"}, "--sigma=0"},
		{[]string{"--epochs", "0"}, "--epochs=0: want at least 1"},
		{[]string{"--knn-every", "1"}, "needs --knn-train"},
		{[]string{"--backend", "tpu"}, `unknown backend "tpu"`},
		{[]string{"--model", "resnet18-cifar"}, "images are 8x8 but resnet18-cifar expects sides of 32 to 96 px"},
		{[]string{"--model", "mlp", "--batch-size", "7"}, "6 view pairs, fewer than one batch of 7"},
		{[]string{"--input", single, "--model", "mlp"}, "holds single views"},
		{[]string{"extra"}, "takes no positional arguments"},
	} {
		code, _, stderr := runDCL(append(base, tc.give...)...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("dcl train %q = %d, %q; want exit 2 and one line with %q", tc.give, code, stderr, tc.want)
		}
	}
	code, _, stderr := runDCL("train", "--output", t.TempDir())
	if code != exitUsage || !strings.Contains(stderr, "--input and --output are required") {
		t.Errorf("dcl train without --input = %d, %q", code, stderr)
	}
}

// `dcl train --json | head -1`: the reader of stdout leaves after one line. The run must go
// on to its checkpoint (the log's copy stops, with a warning), not die of SIGPIPE.
func TestTrainJSONIntoAPipeClosedEarly(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	data, out := t.TempDir(), t.TempDir()
	writeTrainShards(t, data, 12, 8, 2)
	// 1,500 steps print far more than a pipe buffers, so writes follow the reader's leaving.
	cmd := exec.Command(os.Args[0], "train", "--input", data, "--output", out, "--model", "mlp", "--width", "4",
		"--batch-size", "4", "--epochs", "500", "--backend", "cpu", "--checkpoint-every", "0", "--json", "--progress=off")
	cmd.Env = append(os.Environ(), "DCL_TEST_AS_MAIN=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	first, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.Contains(first, `"step":1`) {
		t.Fatalf("first line %q: %v\n%s", first, err, stderr.String())
	}
	stdout.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("dcl train with its stdout closed after one line: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "stopped copying the log to stdout") || !strings.Contains(stderr.String(), "train: finished after 1500 of 1500 steps") {
		t.Errorf("stderr lacks the warning or the summary:\n%s", stderr.String())
	}
}

// A plain dcl train run folder holds its hyper-parameters, every setting as a config's run
// keys take them (the loss's and method's parameters with their defaults), which reproduce
// reads back: the settings given on the command line, the others at their defaults.
func TestTrainWritesItsSettings(t *testing.T) {
	data, out := t.TempDir(), filepath.Join(t.TempDir(), "run")
	writeTrainShards(t, data, 12, 8, 2)
	args := []string{"train", "--input", data, "--output", out, "--model", "mlp", "--width", "4", "--batch-size", "4",
		"--epochs", "1", "--lr", "0.1", "--loss", "dclw", "--sigma", "0.7", "--backend", "cpu", "--progress=off"}
	if code, _, stderr := runDCL(args...); code != exitOK {
		t.Fatalf("dcl train exited %d: %s", code, stderr)
	}
	text, err := os.ReadFile(filepath.Join(out, trainstep.SettingsName))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"\nmodel: mlp\n", "\nbatch_size: 4\n", "\nlr: 0.1\n", "\nloss: dclw\n", "\nsigma: 0.7\n", "\nweight_decay: 0.0005\n", "\nmethod: simclr\n",
		"\n#   max_steps: 0\n"} {
		if !strings.Contains("\n"+string(text), want) {
			t.Errorf("%s lacks %q:\n%s", trainstep.SettingsName, strings.TrimSpace(want), text)
		}
	}
	cfg := "name: again\ndataset: {name: idx, input: x}\npreprocess: {augment: simclr-cifar, passes: 1}\ntrain:\n  defaults:\n" +
		indent(string(text), "    ") + "  runs: [{name: r}]\n"
	c, err := reproduce.Parse(strings.NewReader(cfg), "again.yaml")
	if err != nil {
		t.Fatalf("the settings file is not a config's train.defaults: %v\n%s", err, cfg)
	}
	if r := c.Runs[0]; r.Loss() != "dclw" || r.BatchSize() != 4 || r.Setting("sigma") != 0.7 {
		t.Errorf("read back: loss %s, batch %d, sigma %v", r.Loss(), r.BatchSize(), r.Setting("sigma"))
	}
}

func indent(text, by string) string {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		b.WriteString(by + l + "\n")
	}
	return b.String()
}
