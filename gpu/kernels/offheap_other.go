//go:build !unix

package kernels

// mapFloats returns heap memory where the system has no anonymous mappings.
func mapFloats(n int) []float32 { return make([]float32, n) }
