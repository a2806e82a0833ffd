package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// makeIn runs make with args in the repository root (the Makefile that runs runwatch).
func makeIn(t *testing.T, args ...string) string {
	t.Helper()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	cmd := exec.Command("make", append([]string{"--no-print-directory"}, args...)...)
	cmd.Dir = filepath.Join("..", "..", "..")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestMakeHelpExpandsVariables: make help shows the paths the targets write, not the
// variables that name them.
func TestMakeHelpExpandsVariables(t *testing.T) {
	out := makeIn(t, "help", "GPU_PACK=.pack-x")
	if strings.Contains(out, "$(") {
		t.Errorf("make help shows a variable unexpanded:\n%s", out)
	}
	if !strings.Contains(out, "gpu-pack     .pack-x/:") {
		t.Errorf("make help does not name the GPU pack's folder:\n%s", out)
	}
}

// TestMakeTestStreamsEachPackage: every go test and go build of make test and make build runs
// through runwatch, go test with -json so that runwatch can print each package as it finishes.
func TestMakeTestStreamsEachPackage(t *testing.T) {
	for _, target := range []string{"test", "build"} {
		out := strings.ReplaceAll(makeIn(t, "-n", target), "\\\n", " ") // recipe lines continued with a backslash
		var saw int
		for _, line := range strings.Split(out, "\n") {
			if !strings.Contains(line, " test ") && !strings.Contains(line, " build ") || !strings.Contains(line, "go ") {
				continue
			}
			if strings.Contains(line, "go list") && !strings.Contains(line, "go test") {
				continue
			}
			saw++
			if !strings.Contains(line, "go run ./internal/cmd/runwatch") {
				t.Errorf("make %s runs go without runwatch: %s", target, line)
			}
			if strings.Contains(line, "go test") && (!strings.Contains(line, "-gotest") || !strings.Contains(line, "go test -json")) {
				t.Errorf("make %s runs go test without -json through runwatch -gotest: %s", target, line)
			}
		}
		if saw == 0 {
			t.Errorf("make -n %s shows no go command:\n%s", target, out)
		}
	}
}
