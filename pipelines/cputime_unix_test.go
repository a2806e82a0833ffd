//go:build unix

package pipelines

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time (user + system) this process has used: on a shared machine it
// measures a benchmark's own work better than wall time does.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
