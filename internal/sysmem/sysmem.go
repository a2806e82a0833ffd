// Package sysmem says how much memory the machine has, for bounds that settings must fit in
// (a model's width, a queue's size) to fail as a usage error rather than out of memory.
package sysmem

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// Total returns the machine's memory in bytes, or the process's cgroup limit when that is
// lower (a container), and false where it cannot tell (then bounds are not checked).
func Total() (int64, bool) {
	total, ok := memInfo("/proc/meminfo")
	if !ok {
		return 0, false
	}
	if limit, ok := cgroupLimit(); ok && limit < total {
		return limit, true
	}
	return total, true
}

// memInfo reads MemTotal from a /proc/meminfo file.
func memInfo(p string) (int64, bool) {
	f, err := os.Open(p)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return 0, false
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil || kb <= 0 {
			return 0, false
		}
		return kb << 10, true
	}
	return 0, false
}

// cgroupLimit reads a cgroup v2 (or v1) memory limit of this process's group.
func cgroupLimit() (int64, bool) {
	for _, p := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			return 0, false
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 || n > 1<<60 {
			return 0, false
		}
		return n, true
	}
	return 0, false
}
