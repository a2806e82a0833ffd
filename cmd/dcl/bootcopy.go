package main

import (
	"os"
	"path/filepath"
	"regexp"
)

// bootCopy matches where Beam's Go boot loader (sdks/go/container, v2.77.0) copies the staged
// worker binary before it starts it: a folder of its own under /tmp, made for each worker it
// starts and never removed (the binary is about 200 MB; the disk of a machine that runs many
// jobs fills).
// (os.MkdirTemp("/tmp/", "bin*") names it bin and a decimal number).
var bootCopy = regexp.MustCompile(`^/tmp/bin[0-9]+/worker$`)

// removeBootCopy removes the program file a worker was started from, and its folder, when
// they are boot's copy: boot's path, a folder holding nothing else, and a start by boot
// (which names its pipeline options file in PIPELINE_OPTIONS_FILE). A running program does
// not need its file. It reports whether it removed it.
func removeBootCopy(exe string) bool {
	if !bootCopy.MatchString(exe) || os.Getenv("PIPELINE_OPTIONS_FILE") == "" {
		return false
	}
	if entries, err := os.ReadDir(filepath.Dir(exe)); err != nil || len(entries) != 1 {
		return false
	}
	if err := os.Remove(exe); err != nil {
		return false
	}
	os.Remove(filepath.Dir(exe)) // only if empty: anything else there is not boot's
	return true
}
