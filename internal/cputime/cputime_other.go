//go:build !unix

package cputime

import "time"

// Process returns 0: CPU time is not measured on this system, and benchmarks report only
// wall-time rates.
func Process() time.Duration { return 0 }
