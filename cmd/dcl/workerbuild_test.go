package main

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The workers of a remote runner (Flink, Spark, Dataflow) run the worker binary, built with
// CGO_ENABLED=0 (make worker), and their outputs must be the bytes that prism's workers in
// the cgo build write. They are because the two builds compile the same files in every
// package but a few of the standard library's (net's and os/user's lookups, runtime/cgo): a
// package of ours or of a dependency with a cgo-only file (a C BLAS with a pure-Go fallback,
// kernels chosen by the cgo tag) would make the workers compute other bits.
func TestWorkerBuildCompilesTheSameCode(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command here to list the builds' files")
	}
	files := func(cgo string) map[string]string {
		t.Helper()
		// The files of every package the build compiles, after the build constraints.
		cmd := exec.Command("go", "list", "-deps", "-f",
			"{{if not .Standard}}{{.ImportPath}} {{.GoFiles}} {{.CgoFiles}} {{.SFiles}} {{.CFiles}} {{.CXXFiles}} {{.SysoFiles}}{{end}}", ".")
		cmd.Env = append(os.Environ(), "CGO_ENABLED="+cgo, "GOOS=linux", "GOARCH=amd64")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list with CGO_ENABLED=%s: %v", cgo, err)
		}
		pkgs := map[string]string{}
		for line := range strings.Lines(string(out)) {
			if path, rest, ok := strings.Cut(strings.TrimSpace(line), " "); ok {
				pkgs[path] = rest
			}
		}
		return pkgs
	}
	worker, launcher := files("0"), files("1")
	var differ []string
	for path, w := range worker {
		if l, ok := launcher[path]; !ok || l != w {
			differ = append(differ, path+": worker "+w+", cgo build "+l)
		}
	}
	for path := range launcher {
		if _, ok := worker[path]; !ok {
			differ = append(differ, path+": only in the cgo build")
		}
	}
	if len(differ) > 0 {
		slices.Sort(differ)
		t.Errorf("the worker binary (CGO_ENABLED=0) compiles other files than the cgo build in:\n%s", strings.Join(differ, "\n"))
		return
	}
	if len(worker) < 50 {
		t.Errorf("go list named %d packages outside the standard library; want dcl's whole build", len(worker))
	}
	t.Logf("%d packages outside the standard library, the same files with and without cgo", len(worker))
}
