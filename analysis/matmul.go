package analysis

import "github.com/dcl-beam/dcl-beam/gpu/kernels"

// sgemm is the one matrix multiply under kNN and the linear probe, with the BLAS meaning:
// C = alpha·op(A)·op(B) + beta·C for row-major A, B, C, where op(X) is X or its transpose,
// op(A) is m×k and op(B) is k×n. Every similarity block and every probe step goes through
// this one function, so a different kernel is swapped in here and nowhere else. It runs on
// pool's threads: kNN gives each of its workers a one-thread pool (the workers already split
// the queries), the probe uses the shared pool.
//
// A similarity does not depend on how queries and bank were cut into blocks: the kernel sums
// each element over k in fixed-size depth blocks, in order, whatever m and n are (except when
// it splits k across threads, which a one-thread pool never does).
func sgemm(pool *kernels.Pool, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	pool.Sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// serialPool returns a pool that runs matrix multiplies on the calling goroutine alone; it
// starts no goroutines, so it needs no Close.
func serialPool() *kernels.Pool { return kernels.NewPool(1) }
