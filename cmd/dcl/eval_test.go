package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/pipelines"
)

// TestEvaluationCommands runs the evaluation end to end on tiny shards: train an encoder,
// embed labelled images and view pairs, then knn, linear and npc on the embeddings.
func TestEvaluationCommands(t *testing.T) {
	data, eval, run, work := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()
	writeTrainShards(t, data, 16, 8, 2)
	writeTrainShards(t, eval, 12, 8, 1)
	code, stdout, stderr := runDCL("train", "--input", data, "--output", run, "--model", "mlp", "--width", "4", "--batch-size", "4",
		"--epochs", "1", "--lr", "0.1", "--backend", "cpu", "--temperature", "0.2", "--progress", "off")
	if code != exitOK {
		t.Fatalf("dcl train = %d\n%s\n%s", code, stdout, stderr)
	}

	embed := func(args ...string) {
		t.Helper()
		code, stdout, stderr := runDCL(append([]string{"embed", "--checkpoint", run}, args...)...)
		if code != exitOK {
			t.Fatalf("dcl embed %v = %d\n%s\n%s", args, code, stdout, stderr)
		}
		var res struct {
			Rows int64 `json:"rows"`
			Dim  int   `json:"dim"`
		}
		if err := json.Unmarshal([]byte(stdout), &res); err != nil || res.Rows == 0 || res.Dim == 0 {
			t.Fatalf("dcl embed printed %q (%v)", stdout, err)
		}
	}
	trainEmb, testEmb := filepath.Join(work, "train"), filepath.Join(work, "test.parquet")
	embed("--input", eval, "--output", trainEmb, "--parts", "2")
	embed("--input", eval, "--output", testEmb)
	pairs := filepath.Join(work, "pairs")
	embed("--input", data, "--output", pairs, "--feature", "projection", "--views", "2")

	var knn map[string]any
	code, stdout, stderr = runDCL("knn", "--train", trainEmb, "--test", testEmb, "--k", "5", "--per-class")
	if code != exitOK || json.Unmarshal([]byte(stdout), &knn) != nil {
		t.Fatalf("dcl knn = %d\n%s\n%s", code, stdout, stderr)
	}
	for _, key := range []string{"top1", "top5", "k", "temperature", "n_train", "n_test", "per_class"} {
		if _, ok := knn[key]; !ok {
			t.Errorf("dcl knn output lacks %q: %s", key, stdout)
		}
	}
	// The test images are the training images: each is its own nearest neighbour.
	if knn["top1"].(float64) < 50 || knn["n_train"].(float64) != 12 || knn["k"].(float64) != 5 {
		t.Errorf("dcl knn: %s", stdout)
	}

	var lin map[string]any
	code, stdout, stderr = runDCL("linear", "--train", trainEmb, "--test", testEmb, "--probe-epochs", "3", "--batch-size", "4", "--lr", "0.5")
	if code != exitOK || json.Unmarshal([]byte(stdout), &lin) != nil {
		t.Fatalf("dcl linear = %d\n%s\n%s", code, stdout, stderr)
	}
	if lin["epochs"].(float64) != 3 || lin["optimizer"] != "sgd" || lin["n_test"].(float64) != 12 {
		t.Errorf("dcl linear: %s", stdout)
	}
	// --probe-epochs alone keeps the decays at 60% and 80% of the run, as reproduce does.
	if ms := fmt.Sprint(lin["milestones"]); ms != "[1 2]" {
		t.Errorf("dcl linear --probe-epochs=3: milestones %s, want [1 2] (60 and 80 of 100 epochs, scaled)", ms)
	}
	code, stdout, stderr = runDCL("linear", "--train", trainEmb, "--test", testEmb, "--optimizer", "lars", "--probe-epochs", "2")
	if code != exitOK || !strings.Contains(stdout, `"optimizer":"lars"`) || !strings.Contains(stdout, `"batch_size":4096`) {
		t.Errorf("dcl linear --optimizer=lars = %d\n%s\n%s", code, stdout, stderr)
	}

	npcOut := filepath.Join(work, "npc")
	code, stdout, stderr = runDCL("npc", "--input", pairs, "--batch-sizes", "4,8", "--output", npcOut)
	if code != exitOK {
		t.Fatalf("dcl npc = %d\n%s\n%s", code, stdout, stderr)
	}
	var npc pipelines.NPCSummary
	if err := json.Unmarshal([]byte(stdout), &npc); err != nil || npc.Temperature != 0.2 || len(npc.Stats) != 2 || npc.Stats[1].Anchors != 32 {
		t.Errorf("dcl npc printed %s (%v)", stdout, err)
	}
	for _, f := range []string{"npc.json", "npc.md", "npc-mean-cv.png", "npc-distribution.png"} {
		if _, err := os.Stat(filepath.Join(npcOut, f)); err != nil {
			t.Error(err)
		}
	}
}

func TestLossCommand(t *testing.T) {
	dir := t.TempDir()
	batch := filepath.Join(dir, "batch.json")
	if err := os.WriteFile(batch, []byte(`{"z1": [[1, 0, 0], [0, 1, 0], [0.5, 0.5, 0.1]], "z2": [[0.9, 0.1, 0], [0.1, 1, 0], [0.4, 0.6, 0.2]]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	results := map[string]lossOutput{}
	for _, loss := range []string{"infonce", "dcl", "dclw"} {
		code, stdout, stderr := runDCL("loss", "--input", batch, "--loss", loss, "--temperature", "0.5")
		if code != exitOK {
			t.Fatalf("dcl loss --loss=%s = %d\n%s\n%s", loss, code, stdout, stderr)
		}
		var out lossOutput
		if err := json.Unmarshal([]byte(stdout), &out); err != nil {
			t.Fatalf("dcl loss printed %q: %v", stdout, err)
		}
		if len(out.QB) != 6 || len(out.GradZ1) != 3 || len(out.GradZ2[2]) != 3 {
			t.Fatalf("dcl loss --loss=%s: %s", loss, stdout)
		}
		for key := range map[string]bool{"loss": true, "q_b": true, "grad_z1": true, "grad_z2": true} {
			if !strings.Contains(stdout, `"`+key+`"`) {
				t.Errorf("output lacks %q", key)
			}
		}
		results[loss] = out
	}
	// Mean reduction: InfoNCE - DCL = mean over anchors of -log q.
	var want float64
	for _, q := range results["dcl"].QB {
		want -= math.Log(q)
	}
	want /= 6
	if got := results["infonce"].Loss - results["dcl"].Loss; math.Abs(got-want) > 1e-9 {
		t.Errorf("InfoNCE - DCL = %v, mean -log q = %v", got, want)
	}

	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"z1": [[1, 0], [0, 1]], "z_2": [[1, 0], [0, 1]]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	ragged := filepath.Join(dir, "ragged.json")
	if err := os.WriteFile(ragged, []byte(`{"z1": [[1, 0], [0, 1]], "z2": [[1, 0], [0, 1, 2]]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	trailing := filepath.Join(dir, "trailing.json")
	if err := os.WriteFile(trailing, []byte(`{"z1": [[1, 0], [0, 1]], "z2": [[1, 0], [0, 1]]} {"z1": []}`), 0o644); err != nil {
		t.Fatal(err)
	}
	twice := filepath.Join(dir, "twice.json")
	if err := os.WriteFile(twice, []byte(`{"z1": [[1, 0], [0, 1]], "z2": [[1, 0], [0, 1]], "z1": [[0, 1], [1, 0]]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"loss"}, exitUsage, "--input is required"},
		{[]string{"loss", "--input", trailing}, exitError, "trailing.json: not a batch of embeddings: data after the JSON value"},
		{[]string{"loss", "--input", twice}, exitError, `twice.json: not a batch of embeddings: key "z1" given twice`},
		{[]string{"loss", "--input", batch, "--loss", "ntxent2"}, exitUsage, "unknown loss"},
		{[]string{"loss", "--input", batch, "--temperature", "0"}, exitUsage, "temperature=0"},
		{[]string{"loss", "--input", bad}, exitError, "bad.json"},
		{[]string{"loss", "--input", ragged}, exitError, "ragged.json: z2 row 1 has 3 values"},
		{[]string{"loss", "--input", filepath.Join(dir, "missing.json")}, exitError, "missing.json"},
	}
	for _, tt := range tests {
		code, _, stderr := runDCL(tt.args...)
		if code != tt.code || !strings.Contains(stderr, tt.want) {
			t.Errorf("dcl %v = %d, %q; want %d with %q", tt.args, code, stderr, tt.code, tt.want)
		}
	}
}

func TestEvaluationCommandErrors(t *testing.T) {
	eval, run, work := t.TempDir(), t.TempDir(), t.TempDir()
	writeTrainShards(t, eval, 8, 8, 1)
	emb := filepath.Join(work, "emb.parquet")
	code, stdout, stderr := runDCL("embed", "--checkpoint", run, "--input", eval, "--output", emb)
	if code != exitError || !strings.Contains(stderr, run) {
		t.Errorf("dcl embed without a checkpoint in %s = %d\n%s\n%s", run, code, stdout, stderr)
	}
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"embed", "--input", eval}, exitUsage, "--checkpoint, --input and --output are required"},
		{[]string{"knn", "--train", "a.parquet"}, exitUsage, "--train and --test are required"},
		{[]string{"knn", "--train", "a.parquet", "--test", "b.parquet", "--metric", "manhattan"}, exitUsage, "--metric"},
		{[]string{"knn", "--train", filepath.Join(work, "none.parquet"), "--test", filepath.Join(work, "none.parquet")}, exitError, "none.parquet"},
		{[]string{"linear", "--train", "a.parquet", "--test", "b.parquet", "--optimizer", "adam"}, exitUsage, "--optimizer"},
		{[]string{"npc", "--input", "p"}, exitUsage, "--input and --output are required"},
		{[]string{"npc", "--input", "p", "--output", "o", "--batch-sizes", "a,b"}, exitUsage, "--batch-sizes"},
		{[]string{"npc", "--input", "p", "--output", "o", "--batch-sizes", "1,64"}, exitUsage, "--batch-sizes: batch size 1: want at least 2"},
		{[]string{"npc", "--input", "p", "--output", "o", "--temperature", "-1"}, exitUsage, "--temperature=-1: want a positive number"},
		{[]string{"embed", "--checkpoint", run, "--input", eval, "--output", emb, "--views", "3"}, exitUsage, "--views=3: want 1 or 2"},
		{[]string{"embed", "--checkpoint", run, "--input", eval, "--output", emb, "--pass", "-2"}, exitUsage, "--pass=-2"},
	}
	for _, tt := range tests {
		code, _, stderr := runDCL(tt.args...)
		if code != tt.code || !strings.Contains(stderr, tt.want) {
			t.Errorf("dcl %v = %d, %q; want %d with %q", tt.args, code, stderr, tt.code, tt.want)
		}
	}
}

// TestLossCommandQueueForm: a batch with "queue" is evaluated in MoCo's form: N queries,
// their keys as positives, every queue row a negative; checked against the equations
// written out here.
func TestLossCommandQueueForm(t *testing.T) {
	dir := t.TempDir()
	batch := filepath.Join(dir, "queue.json")
	z1 := [][]float64{{1, 0, 0}, {0, 2, 0}}
	z2 := [][]float64{{0.9, 0.1, 0}, {0.1, 1, 0.3}}
	queue := [][]float64{{0, 0, 1}, {1, 1, 0}, {-1, 0.5, 0}}
	data, _ := json.Marshal(map[string]any{"z1": z1, "z2": z2, "queue": queue})
	if err := os.WriteFile(batch, data, 0o644); err != nil {
		t.Fatal(err)
	}
	unit := func(v []float64) []float64 {
		n := math.Sqrt(v[0]*v[0] + v[1]*v[1] + v[2]*v[2])
		return []float64{v[0] / n, v[1] / n, v[2] / n}
	}
	dot := func(a, b []float64) float64 { return a[0]*b[0] + a[1]*b[1] + a[2]*b[2] }
	const tau = 0.5
	var wantInfoNCE, wantDCL float64
	for i := range z1 {
		s := dot(unit(z1[i]), unit(z2[i])) / tau
		var u float64
		for _, k := range queue {
			u += math.Exp(dot(unit(z1[i]), unit(k)) / tau)
		}
		wantInfoNCE += (-s + math.Log(math.Exp(s)+u)) / 2
		wantDCL += (-s + math.Log(u)) / 2
	}
	for loss, want := range map[string]float64{"infonce": wantInfoNCE, "dcl": wantDCL} {
		code, stdout, stderr := runDCL("loss", "--input", batch, "--loss", loss, "--temperature", "0.5")
		if code != exitOK {
			t.Fatalf("dcl loss --loss=%s = %d\n%s", loss, code, stderr)
		}
		var out lossOutput
		if err := json.Unmarshal([]byte(stdout), &out); err != nil {
			t.Fatal(err)
		}
		if math.Abs(out.Loss-want) > 1e-12 || len(out.QB) != 2 || len(out.GradZ1) != 2 || len(out.GradZ2) != 2 {
			t.Errorf("queue form, %s: %s; want loss %v and 2 multipliers and gradient rows", loss, stdout, want)
		}
	}
	code, _, stderr := runDCL("loss", "--input", batch, "--loss", "hypersphere")
	if code != exitError || !strings.Contains(stderr, "no queue form") {
		t.Errorf("hypersphere with a queue = %d, %q; want an error saying it has no queue form", code, stderr)
	}
}
