package analysis

// sgemm is the one matrix multiply under kNN and the linear probe, with the BLAS meaning:
// C = alpha·op(A)·op(B) + beta·C for row-major A, B, C, where op(X) is X or its transpose,
// op(A) is m×k and op(B) is k×n. Every similarity block and every probe step goes through
// this one function, so a faster kernel is swapped in here and nowhere else.
//
// Each element of C is computed by one sequential sum over k, whatever m and n are, so the
// value of a similarity does not depend on how queries and the bank were cut into blocks.
func sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	sgemmGo(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// sgemmGo is a plain-Go, single-threaded sgemm: register-blocked dot products for A·Bᵀ (the
// kNN case) and row updates for the others.
func sgemmGo(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	for i := range m {
		row := c[i*ldc : i*ldc+n]
		switch beta {
		case 0:
			clear(row) // as in BLAS: C is not read, so NaNs in it do not survive
		case 1:
		default:
			for j := range row {
				row[j] *= beta
			}
		}
	}
	if alpha == 0 || k == 0 || m == 0 || n == 0 {
		return
	}
	switch {
	case !transA && transB:
		gemmNT(m, n, k, alpha, a, lda, b, ldb, c, ldc)
	case !transB:
		// C[i,:] += alpha·A(i,p)·B[p,:], rows of B contiguous.
		for i := range m {
			crow := c[i*ldc : i*ldc+n]
			for p := range k {
				var aip float32
				if transA {
					aip = a[p*lda+i]
				} else {
					aip = a[i*lda+p]
				}
				if aip == 0 {
					continue
				}
				s := alpha * aip
				brow := b[p*ldb : p*ldb+n]
				for j, bv := range brow {
					crow[j] += s * bv
				}
			}
		}
	default: // Aᵀ·Bᵀ: rare, kept simple
		for i := range m {
			for j := range n {
				var s float32
				for p := range k {
					s += a[p*lda+i] * b[j*ldb+p]
				}
				c[i*ldc+j] += alpha * s
			}
		}
	}
}

// gemmNT computes C += alpha·A·Bᵀ as dot products of rows, four rows of A against four rows
// of B at a time so each loaded value is used four times.
func gemmNT(m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	i := 0
	for ; i+4 <= m; i += 4 {
		a0 := a[i*lda : i*lda+k]
		a1 := a[(i+1)*lda : (i+1)*lda+k]
		a2 := a[(i+2)*lda : (i+2)*lda+k]
		a3 := a[(i+3)*lda : (i+3)*lda+k]
		j := 0
		for ; j+4 <= n; j += 4 {
			b0 := b[j*ldb : j*ldb+k]
			b1 := b[(j+1)*ldb : (j+1)*ldb+k]
			b2 := b[(j+2)*ldb : (j+2)*ldb+k]
			b3 := b[(j+3)*ldb : (j+3)*ldb+k]
			var c00, c01, c02, c03, c10, c11, c12, c13 float32
			var c20, c21, c22, c23, c30, c31, c32, c33 float32
			for p := range a0 {
				x0, x1, x2, x3 := a0[p], a1[p], a2[p], a3[p]
				y0, y1, y2, y3 := b0[p], b1[p], b2[p], b3[p]
				c00 += x0 * y0
				c01 += x0 * y1
				c02 += x0 * y2
				c03 += x0 * y3
				c10 += x1 * y0
				c11 += x1 * y1
				c12 += x1 * y2
				c13 += x1 * y3
				c20 += x2 * y0
				c21 += x2 * y1
				c22 += x2 * y2
				c23 += x2 * y3
				c30 += x3 * y0
				c31 += x3 * y1
				c32 += x3 * y2
				c33 += x3 * y3
			}
			r0, r1, r2, r3 := c[i*ldc+j:i*ldc+j+4], c[(i+1)*ldc+j:(i+1)*ldc+j+4], c[(i+2)*ldc+j:(i+2)*ldc+j+4], c[(i+3)*ldc+j:(i+3)*ldc+j+4]
			r0[0] += alpha * c00
			r0[1] += alpha * c01
			r0[2] += alpha * c02
			r0[3] += alpha * c03
			r1[0] += alpha * c10
			r1[1] += alpha * c11
			r1[2] += alpha * c12
			r1[3] += alpha * c13
			r2[0] += alpha * c20
			r2[1] += alpha * c21
			r2[2] += alpha * c22
			r2[3] += alpha * c23
			r3[0] += alpha * c30
			r3[1] += alpha * c31
			r3[2] += alpha * c32
			r3[3] += alpha * c33
		}
		for ; j < n; j++ {
			bj := b[j*ldb : j*ldb+k]
			c[i*ldc+j] += alpha * dot32(a0, bj)
			c[(i+1)*ldc+j] += alpha * dot32(a1, bj)
			c[(i+2)*ldc+j] += alpha * dot32(a2, bj)
			c[(i+3)*ldc+j] += alpha * dot32(a3, bj)
		}
	}
	for ; i < m; i++ {
		ai := a[i*lda : i*lda+k]
		for j := range n {
			c[i*ldc+j] += alpha * dot32(ai, b[j*ldb:j*ldb+k])
		}
	}
}

// dot32 sums in the same order as gemmNT's blocked loop, so an edge element equals what the
// blocked path would have computed.
func dot32(x, y []float32) float32 {
	y = y[:len(x)]
	var s float32
	for p, xv := range x {
		s += xv * y[p]
	}
	return s
}
