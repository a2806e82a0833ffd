package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/dcl-beam/dcl-beam/internal/rawname"
	"github.com/dcl-beam/dcl-beam/internal/testing/testfiles"
	"github.com/dcl-beam/dcl-beam/shards"
	"github.com/dcl-beam/dcl-beam/shards/embeddings"
)

// File, folder and output names are bytes, not UTF-8: a class folder named in Latin-1
// ("caf\xe9"), one named with the four characters \xe9, and files "a\xff.png" (a byte, and
// the four characters) go through
// preprocess, train, embed and knn with every output under a folder whose name is not UTF-8
// either. Each output lands at the path given, byte for byte, and nowhere else; the classes
// stay three, named by their rawname.Text (`caf\xe9` and `caf\x5cxe9`), as do the keys; every
// JSON file and line written is UTF-8 with no U+FFFD.
func TestNamesThatAreNotUTF8EndToEnd(t *testing.T) {
	photos := t.TempDir()
	for i, f := range []string{"caf\xe9/a\xff.png", "caf\xe9/b.png", `caf\xe9/a\xff.png`, `caf\xe9/c.png`, "dog/a\xff.png", "dog/b.png"} {
		testfiles.WriteFile(t, filepath.Join(photos, f), testfiles.PNG(t, 8, 8, i))
	}
	work := filepath.Join(t.TempDir(), "w\xe9")
	out := func(name string) string { return filepath.Join(work, name) }
	ev, tr, run, embTrain, embTest := out("ev\xe9"), out("tr\xff"), out("r\xe9"), out("t\xe9"), out("q\xe9.parquet")
	dcl := func(args ...string) string {
		t.Helper()
		code, stdout, stderr := runDCL(append(args, "--progress", "off")...)
		if code != exitOK {
			t.Fatalf("dcl %s = %d\n%s\n%s", strings.Join(args, " "), code, stdout, stderr)
		}
		if strings.Contains(stdout, "\uFFFD") || strings.HasPrefix(stdout, "{") && !utf8.ValidString(stdout) {
			t.Errorf("dcl %s printed %q: a name's bytes lost, or JSON that is not text", args[0], stdout)
		}
		return stdout
	}
	dcl("preprocess", "--dataset=folder", "--input="+photos, "--size=8", "--augment=none", "--output="+ev)
	dcl("preprocess", "--dataset=folder", "--input="+photos, "--size=8", "--passes=1", "--output="+tr)
	dcl("train", "--input="+tr, "--output="+run, "--model=mlp", "--width=4", "--batch-size=4", "--epochs=1", "--backend=cpu")
	emb := dcl("embed", "--checkpoint="+run, "--input="+ev, "--output="+embTrain)
	dcl("embed", "--checkpoint="+run, "--input="+ev, "--output="+embTest)
	knn := dcl("knn", "--train="+embTrain, "--test="+embTest, "--k=2", "--per-class", "--output="+out("knn\xff.json"))

	entries, err := os.ReadDir(work)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ".") {
			names = append(names, e.Name())
		}
	}
	if want := []string{"ev\xe9", "knn\xff.json", "q\xe9.parquet", "r\xe9", "tr\xff", "t\xe9"}; !slices.Equal(names, want) {
		t.Errorf("the outputs are %q, want exactly %q", names, want)
	}

	classes := []string{`caf\x5cxe9`, `caf\xe9`, "dog"}
	m, err := shards.ReadManifest(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(m.Config.Classes, classes) {
		t.Errorf("the manifest's classes are %q, want %q", m.Config.Classes, classes)
	}
	var sources []string
	for _, s := range m.Config.Sources {
		sources = append(sources, s.Name)
	}
	if want := []string{rawname.Text(photos) + `/caf\x5cxe9`, rawname.Text(photos) + `/caf\xe9`, rawname.Text(photos) + "/dog"}; !slices.Equal(sources, want) {
		t.Errorf("the manifest's sources are %q, want %q", sources, want)
	}

	r, err := embeddings.Open(context.Background(), embTrain, 64)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for b, err := range r.Blocks() {
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, b.Keys...)
	}
	r.Close()
	slices.Sort(keys)
	wantKeys := []string{`train/caf\x5cxe9/a\x5cxff.png`, `train/caf\x5cxe9/c.png`, `train/caf\xe9/a\xff.png`, `train/caf\xe9/b.png`, `train/dog/a\xff.png`, "train/dog/b.png"}
	if !slices.Equal(keys, wantKeys) || !slices.Equal(r.Classes(), classes) {
		t.Errorf("the embeddings' keys are %q and classes %q, want %q and %q", keys, r.Classes(), wantKeys, classes)
	}
	if got := r.Meta()[embeddings.MetaCheckpoint]; !strings.HasPrefix(got, rawname.Text(run)+"/") {
		t.Errorf("the embeddings name their checkpoint %q, want it under %q", got, rawname.Text(run))
	}
	var printed struct{ Output string }
	if err := json.Unmarshal([]byte(emb), &printed); err != nil || printed.Output != rawname.Text(embTrain) {
		t.Errorf("dcl embed printed the output %q (%v), want %q", printed.Output, err, rawname.Text(embTrain))
	}

	var res struct {
		Top1     float64
		PerClass []struct{ Name string } `json:"per_class"`
	}
	if err := json.Unmarshal([]byte(knn), &res); err != nil {
		t.Fatal(err)
	}
	var perClass []string
	for _, c := range res.PerClass {
		perClass = append(perClass, c.Name)
	}
	if !slices.Equal(perClass, classes) {
		t.Errorf("dcl knn's classes are %q, want %q", perClass, classes)
	}
	for _, f := range []string{filepath.Join(ev, shards.ManifestName), filepath.Join(embTrain, embeddings.ManifestName), out("knn\xff.json"),
		filepath.Join(run, "summary.json"), filepath.Join(run, "train.jsonl")} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !utf8.Valid(data) || strings.Contains(string(data), "\uFFFD") {
			t.Errorf("%q is not text, or lost a name's bytes:\n%s", f, data)
		}
	}
}
