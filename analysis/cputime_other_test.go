//go:build !unix

package analysis

// cpuSeconds is not measured here: benchmarks report wall time only.
func cpuSeconds() float64 { return 0 }
