package cuda

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
)

// Driver is the NVIDIA kernel driver as the machine reports it.
type Driver struct {
	// Version is the driver's version ("580.82.07"); empty when no driver is loaded.
	Version string `json:"version,omitempty"`
	// Major is the version's first number (580), which decides the newest CUDA it runs.
	Major int `json:"major,omitempty"`
	// Source is the file or call the version was read from.
	Source string `json:"source,omitempty"`
	// CUDA is the newest CUDA version the driver supports, as cuDriverGetVersion reports it
	// (13000 for 13.0); 0 when unknown (only binaries built with the cuda tag ask libcuda).
	CUDA int `json:"cuda,omitempty"`
}

var driverVersionRE = regexp.MustCompile(`Kernel Module(?:\s+for\s+\S+)?\s+(\d+)\.(\d+)(?:\.(\d+))?`)

// readDriver parses the kernel driver's version file (/proc/driver/nvidia/version), whose first
// line reads "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.82.07  Sun …" (or "… Open
// Kernel Module for x86_64  580.82.07 …" for the open modules).
func readDriver(path string) (Driver, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Driver{}, err
	}
	m := driverVersionRE.FindSubmatch(raw)
	if m == nil {
		return Driver{}, fmt.Errorf("%s: no driver version in %q", path, firstLine(raw))
	}
	major, _ := strconv.Atoi(string(m[1]))
	v := string(m[1]) + "." + string(m[2])
	if len(m[3]) > 0 {
		v += "." + string(m[3])
	}
	return Driver{Version: v, Major: major, Source: path}, nil
}

func firstLine(b []byte) string {
	for i, c := range b {
		if c == '\n' {
			return string(b[:i])
		}
	}
	return string(b)
}

// MinDriverMajor is the oldest Linux driver branch that runs a CUDA major version: NVIDIA's
// CUDA Toolkit release notes, table "CUDA Toolkit and Minimum Required Driver Version"
// (minor-version compatibility: any 12.x runs on ≥ 525, any 13.x on ≥ 580). 0 when unknown.
func MinDriverMajor(cudaMajor int) int {
	switch cudaMajor {
	case 11:
		return 450
	case 12:
		return 525
	case 13:
		return 580
	}
	return 0
}

// deviceFiles lists the GPU device nodes (/dev/nvidia0, /dev/nvidia1, …; not nvidiactl or
// nvidia-uvm, which exist without any GPU in many containers).
func deviceFiles(devDir string) []string {
	m, _ := filepath.Glob(filepath.Join(devDir, "nvidia[0-9]*"))
	slices.Sort(m)
	return m
}
