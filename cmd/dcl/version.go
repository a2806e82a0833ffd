package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/dcl-beam/dcl-beam/gpu"
)

// version is set at link time by the Makefile (-X main.version=…); builds without it report
// the module version from the build information.
var version = ""

func versionCommand() *command {
	return &command{
		name:    "version",
		summary: "print the version, the Go version and the compute backends compiled in",
		setup: func(_ *flag.FlagSet, out streams) func(context.Context, []string) error {
			return func(_ context.Context, args []string) error {
				if len(args) > 0 {
					return usagef("takes no arguments, got %q", args)
				}
				return printVersion(out.stdout)
			}
		},
	}
}

// codeVersion is this program's version, as `dcl version` prints it and the shards,
// checkpoints and reports record it.
func codeVersion() string {
	if version != "" {
		return version
	}
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" {
		return info.Main.Version
	}
	return "(devel)"
}

// codeIdentity names the code that runs, for reproduce --rerun-on-code-change: the version,
// and where that does not pin the code (a build's "(devel)", or a modified checkout's
// "-dirty" or "+dirty") the SHA-256 of this binary too, so that any rebuild of changed code
// counts as another version.
func codeIdentity() string {
	v := codeVersion()
	if v != "(devel)" && !strings.HasSuffix(v, "dirty") {
		return v
	}
	sum, err := executableSHA256()
	if err != nil {
		return v
	}
	return v + " binary " + sum[:16]
}

// executableSHA256 is the hex SHA-256 of this program's file.
func executableSHA256() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	f, err := os.Open(exe)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func printVersion(w io.Writer) error {
	info, _ := debug.ReadBuildInfo()
	v := codeVersion()
	var backends []string
	for _, b := range gpu.Compiled() {
		backends = append(backends, string(b))
	}
	_, err := fmt.Fprintf(w, "dcl %s%s\ngo: %s %s/%s\nbackends: %s\nbeam: %s\n",
		v, vcsSuffix(info, v), runtime.Version(), runtime.GOOS, runtime.GOARCH, strings.Join(backends, ", "), depVersion(info, "github.com/apache/beam/sdks/v2"))
	return err
}

// vcsSuffix names the commit a build from a checkout was made at (" (commit 35f0576,
// modified)") where the version v does not already (a Makefile build's VERSION, "(devel)").
func vcsSuffix(info *debug.BuildInfo, v string) string {
	if info == nil {
		return ""
	}
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value[:min(7, len(s.Value))]
		case "vcs.modified":
			if s.Value == "true" {
				modified = ", modified"
			}
		}
	}
	if rev == "" || strings.Contains(v, rev) {
		return ""
	}
	return " (commit " + rev + modified + ")"
}

func depVersion(info *debug.BuildInfo, path string) string {
	if info == nil {
		return "unknown"
	}
	for _, d := range info.Deps {
		if d.Path == path {
			return d.Version
		}
	}
	return "unknown"
}
