package main

import (
	"image"
	"image/color"
	"image/png"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// quickstartSection is the README's heading of the quickstart on one's own images.
const quickstartSection = "## Your own images"

// maxQuickstartLines bounds the quickstart: it is the README's first stop for a reader with
// photos of their own.
const maxQuickstartLines = 40

// quickstartScale are the overrides the test adds to each `dcl reproduce` of the quickstart, so
// that its commands run on the test's few small images in seconds: a model and epochs for a
// test, not the quickstart's.
var quickstartScale = []string{"--set", "train.defaults.model=small-cnn", "--set", "train.defaults.epochs=2",
	"--set", "train.defaults.batch_size=8", "--set", "train.defaults.backend=cpu", "--set", "dataset.image_size=32",
	"--set", "evaluate.linear.epochs=2", "--set", "evaluate.knn_every=1", "--progress=off", "--log-level=warn"}

// The README's quickstart on one's own images is at most maxQuickstartLines long, and every
// command in it runs as written on a folder of images laid out as it says (with the config it
// gives, scaled down by --set for a test; `make build` builds the binary this test runs in
// process): the plan, the reproduction, whose report exists, and the export.
func TestReadmeQuickstartRuns(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	start := strings.Index(text, quickstartSection+"\n")
	if start < 0 {
		t.Fatalf("README.md has no section %q", quickstartSection)
	}
	section := text[start:]
	if end := strings.Index(section[len(quickstartSection):], "\n## "); end >= 0 {
		section = section[:len(quickstartSection)+end+1]
	}
	if n := strings.Count(strings.TrimSpace(section), "\n") + 1; n > maxQuickstartLines {
		t.Errorf("the quickstart is %d lines, want at most %d", n, maxQuickstartLines)
	}
	blocks := regexp.MustCompile("(?s)```(\\w+)\n(.*?)```").FindAllStringSubmatch(section, -1)
	code := map[string]string{}
	for _, b := range blocks {
		code[b[1]] += b[2]
	}
	if code["yaml"] == "" || code["sh"] == "" || code["text"] == "" {
		t.Fatalf("the quickstart lacks its layout (text), config (yaml) or commands (sh): %q", section)
	}

	dir := t.TempDir()
	t.Chdir(dir)
	config := regexp.MustCompile("`([^`]+\\.yaml)`").FindStringSubmatch(section)
	if config == nil {
		t.Fatal("the quickstart names no config file")
	}
	if err := os.WriteFile(config[1], []byte(code["yaml"]), 0o644); err != nil {
		t.Fatal(err)
	}
	// The layout it shows: photos/SPLIT/CLASS/*.jpg; the test's images are PNGs, which it
	// takes as well.
	folders := regexp.MustCompile(`(\S+)/\*\.jpg`).FindAllStringSubmatch(code["text"], -1)
	if len(folders) < 4 {
		t.Fatalf("the layout names %d class folders, want two classes of two splits: %q", len(folders), code["text"])
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i, f := range folders {
		n := 16
		if strings.Contains(f[1], "/test/") {
			n = 4
		}
		writeClassImages(t, f[1], n, i%2, rng)
	}

	ran := 0
	for _, line := range strings.Split(code["sh"], "\n") {
		line, _, _ = strings.Cut(line, "#")
		args := strings.Fields(line)
		if len(args) == 0 || args[0] == "make" {
			continue
		}
		if args[0] != "bin/dcl" {
			t.Fatalf("the quickstart runs %q, which this test does not know", line)
		}
		args = args[1:]
		if args[0] == "reproduce" {
			args = append(args, quickstartScale...)
		}
		code, stdout, stderr := runDCL(args...)
		if code != exitOK {
			t.Fatalf("dcl %s exited %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, stdout, stderr)
		}
		ran++
	}
	if ran != 3 {
		t.Errorf("ran %d dcl commands of the quickstart, want 3 (plan, reproduce, export)", ran)
	}
	for _, p := range regexp.MustCompile(`(runs/\S+/report\.md|--output=(\S+\.safetensors))`).FindAllStringSubmatch(code["sh"], -1) {
		file := p[1]
		if p[2] != "" {
			file = p[2]
		}
		if _, err := os.Stat(file); err != nil {
			t.Errorf("the quickstart says it writes %s: %v", file, err)
		}
	}
}

// writeClassImages writes n PNGs of 40×48 pixels into dir, of one of two classes (mostly red
// or mostly blue, with noise).
func writeClassImages(t *testing.T, dir string, n, class int, rng *rand.Rand) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		img := image.NewRGBA(image.Rect(0, 0, 40, 48))
		for y := range 48 {
			for x := range 40 {
				v := uint8(rng.IntN(96))
				c := color.RGBA{160 + v, v, v, 255}
				if class == 1 {
					c = color.RGBA{v, v, 160 + v, 255}
				}
				img.Set(x, y, c)
			}
		}
		f, err := os.Create(filepath.Join(dir, strings.Repeat("x", i%3+1)+string(rune('a'+i))+".png"))
		if err != nil {
			t.Fatal(err)
		}
		if err := png.Encode(f, img); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
