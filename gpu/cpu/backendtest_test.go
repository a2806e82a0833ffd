package cpu

import (
	"testing"

	"github.com/gomlx/compute/support/backendtest"
)

// TestBackendCompliance runs GoMLX's own backend compliance suite (the one its backends run)
// on this backend: every operation it offers, through our kernels where we have them and the
// pure-Go backend's where not, must give GoMLX's expected results.
func TestBackendCompliance(t *testing.T) {
	backendtest.RunAll(t, newTestBackend(t), nil)
}
