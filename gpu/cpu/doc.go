// Package cpu is the project's GoMLX backend for CPUs ("dclcpu"): GoMLX's pure-Go backend
// ("go", package github.com/gomlx/compute/gobackend) with the operations that dominate a
// convnet replaced by our own kernels, and the batch-norm operations it lacks added.
//
// It keeps its own graph and executor. Each operation it implements itself runs a kernel from
// package kernels: convolutions (any axes layout, strides, padding, input and kernel dilation,
// channel groups) as one packed matrix multiply that reads the image directly (implicit im2col),
// DotGeneral as batched packed matrix multiplies, fused batch normalisation (training,
// inference, gradient), Reverse, Pad and SelectAndScatter (max-pool gradients). Every other
// operation is compiled, when the graph is built, into a one-operation executable of the pure-Go
// backend and run on its buffers (which this backend's Buffer wraps), so values pass between the
// two without copies. Operations run one after another, each using every core through one
// worker pool. Fused operations (FusedDense, FusedSoftmax, …) are left unimplemented on purpose:
// GoMLX then builds them from standard operations, which this backend fuses and rematerialises
// itself.
//
// Memory: at Compile, chains of element-wise operations fuse into single passes, and cheap
// element-wise values that the backward pass would read long after they were made (batch
// norm's output, the ReLU's input and its zeros, residual sums, the ReLU's output for a kernel
// gradient) are recomputed where they are read from values kept anyway (the convolutions'
// outputs), instead of being kept themselves (remat.go); a value's
// buffer is released after its last use, or written over by its last reader. Released buffers
// of 64 KiB and more stay in the backend's pool for the next operation of that shape (across
// executions too: the garbage collector does not empty it), so a training loop stops
// allocating after its first step. Results are bit for bit those of the plain order.
//
// The backend needs no cgo and is what `CGO_ENABLED=0` builds (Beam workers) run.
package cpu
