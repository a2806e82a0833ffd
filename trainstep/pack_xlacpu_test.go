//go:build cuda

package trainstep

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"
)

// packXLATolerance bounds the relative difference between a packed run on XLA and the run
// alone: XLA compiles the pack as one module and may fuse and order its operations otherwise
// than each run's own program, which moves float32 results by some units of rounding per
// operation over the four steps; a run that reads another's learning rate, batch or weights
// is off in the second decimal.
const packXLATolerance = 1e-5

func withinPackTolerance(what string, packed, alone float64) error {
	if d := math.Abs(packed - alone); d > packXLATolerance*max(math.Abs(alone), 1e-3) {
		return fmt.Errorf("%s: packed %v, alone %v (relative difference %.3g, tolerance %g)", what, packed, alone, d/math.Abs(alone), packXLATolerance)
	}
	return nil
}

// TestXLACPUPackedStepEqualsRunsAlone: on XLA, the packed program is one executable whose
// sub-graphs XLA may fuse and schedule otherwise than each run's own: every packed run's loss
// at every step and its variables at the end agree with the run alone within float32's
// rounding (the relative root mean square difference of each variable).
func TestXLACPUPackedStepEqualsRunsAlone(t *testing.T) {
	onXLACPU(t)
	testPackedStepEqualsRunsAlone(t, withinPackTolerance, func(t *testing.T, name string, packed, alone []byte) {
		if len(packed) != len(alone) || len(alone)%4 != 0 {
			t.Fatalf("%s: %d bytes packed, %d alone", name, len(packed), len(alone))
		}
		var diff, norm float64
		for i := 0; i < len(alone); i += 4 {
			a := float64(math.Float32frombits(binary.LittleEndian.Uint32(alone[i:])))
			p := float64(math.Float32frombits(binary.LittleEndian.Uint32(packed[i:])))
			diff += (p - a) * (p - a)
			norm += a * a
		}
		if diff > packXLATolerance*packXLATolerance*max(norm, 1e-12) {
			t.Errorf("%s: relative rms difference %.3g between the packed run and the run alone, tolerance %g", name, math.Sqrt(diff/norm), packXLATolerance)
		}
	})
}
