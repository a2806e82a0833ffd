package kernels

// peakLoop is an assembly loop of independent FMAs: the most float32 arithmetic one core can do
// with that instruction set, against which the matrix multiply's speed is measured.
type peakLoop struct {
	name         string
	flopsPerIter int
	fn           func(iters int)
}
