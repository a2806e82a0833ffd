//go:build unix

package analysis

import "syscall"

// cpuSeconds returns the process's user plus system CPU time: benchmarks divide work by it
// as well as by wall time, because on a shared machine wall time also counts other
// processes' turns.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}
