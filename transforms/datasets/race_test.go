//go:build race

package datasets

// raceDetector: the race detector multiplies a process's memory and slows allocation-heavy
// code tenfold, so memory bounds are not measured under it.
const raceDetector = true
