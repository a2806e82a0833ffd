package pipelines

import "syscall"

// cpuSeconds returns the process's user plus system CPU time, so that benchmarks can report
// work per CPU-second, which other processes on a shared machine do not dilute.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}
