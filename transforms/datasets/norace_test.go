//go:build !race

package datasets

const raceDetector = false
