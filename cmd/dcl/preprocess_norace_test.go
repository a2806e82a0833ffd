//go:build !race

package main

// raceFlags are the build flags of this test binary that change how packages compile:
// binaries the tests build with them reuse the compiled packages of the test build.
var raceFlags = []string{}
