// Package kernels holds the float32 compute kernels under the CPU backend, in plain Go with an
// AVX2/FMA (and AVX-512) assembly micro-kernel on amd64: a packed, cache-blocked matrix multiply
// (Sgemm) whose operands can be packed straight from a convolution's input (implicit im2col),
// and the worker Pool that parallelises them without oversubscribing the cores.
//
// The micro-kernel is chosen once, at run time, from the CPU's features (golang.org/x/sys/cpu);
// every machine has the portable pure-Go one, so CGO_ENABLED=0 builds and other architectures
// work unchanged, only slower.
package kernels
