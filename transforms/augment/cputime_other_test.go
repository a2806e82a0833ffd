//go:build !linux

package augment

import "time"

// cpuTime is not measured on this platform; benchmarks then report only wall-time rates.
func cpuTime() time.Duration { return 0 }
