package kernels

// availableKernels lists every micro-kernel this machine can run, the selected one first.
func availableKernels() []*microKernel {
	ks := []*microKernel{selectedKernel}
	for _, k := range allKernels() {
		if k != selectedKernel {
			ks = append(ks, k)
		}
	}
	return ks
}

// newPoolWithKernel is NewPool with a chosen micro-kernel.
func newPoolWithKernel(threads int, k *microKernel) *Pool {
	p := NewPool(threads)
	p.kernel = k
	return p
}
