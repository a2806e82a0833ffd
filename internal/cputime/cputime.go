// Package cputime reads the CPU time this process has used, for benchmarks that report work
// per CPU-second: on a shared machine wall time also counts other processes' turns, CPU
// time does not.
package cputime
