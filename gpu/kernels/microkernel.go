package kernels

import "unsafe"

// genericKernel is the portable micro-kernel (any architecture, or amd64 without AVX2/FMA).
var genericKernel = &microKernel{name: "go-4x8", mr: 4, nr: 8, fn: gemmGo4x8, indirect: convIndirectGo4x8}

// selectedKernel is the fastest micro-kernel this CPU runs, chosen once at start-up.
var selectedKernel = bestKernel()

// KernelName names the micro-kernel the matrix multiply uses on this machine ("avx512-12x32",
// "avx2-6x16" or "go-4x8").
func KernelName() string { return selectedKernel.name }

// gemmGo4x8 computes C[4×8] += A·B for packed panels in plain Go.
func gemmGo4x8(kc int, ap, bp, cp unsafe.Pointer, ldc int) {
	a := unsafe.Slice((*float32)(ap), kc*4)
	b := unsafe.Slice((*float32)(bp), kc*8)
	var acc [4][8]float32
	for p := range kc {
		bv := (*[8]float32)(b[p*8 : p*8+8])
		av := (*[4]float32)(a[p*4 : p*4+4])
		for i := range 4 {
			x := av[i]
			r := &acc[i]
			r[0] += x * bv[0]
			r[1] += x * bv[1]
			r[2] += x * bv[2]
			r[3] += x * bv[3]
			r[4] += x * bv[4]
			r[5] += x * bv[5]
			r[6] += x * bv[6]
			r[7] += x * bv[7]
		}
	}
	c := unsafe.Slice((*float32)(cp), 3*ldc+8)
	for i := range 4 {
		row := (*[8]float32)(c[i*ldc : i*ldc+8])
		for j := range 8 {
			row[j] += acc[i][j]
		}
	}
}

// convIndirectGo4x8 is microKernel.indirect in plain Go.
func convIndirectGo4x8(nseg, kc int, offs *int64, x, zero, bp, cp unsafe.Pointer, ldc int) {
	o := unsafe.Slice(offs, nseg*4)
	b := unsafe.Slice((*float32)(bp), nseg*kc*8)
	var acc [4][8]float32
	for seg := range nseg {
		var rows [4][]float32
		for i := range 4 {
			start := unsafe.Add(zero, -4*kc)
			if off := o[seg*4+i]; off >= 0 {
				start = unsafe.Add(x, 4*(int(off)-kc))
			}
			rows[i] = unsafe.Slice((*float32)(start), kc)
		}
		bs := b[seg*kc*8:]
		for p := range kc {
			bv := (*[8]float32)(bs[p*8 : p*8+8])
			for i := range 4 {
				v := rows[i][p]
				r := &acc[i]
				for j := range 8 {
					r[j] += v * bv[j]
				}
			}
		}
	}
	c := unsafe.Slice((*float32)(cp), 3*ldc+8)
	for i := range 4 {
		for j := range 8 {
			c[i*ldc+j] += acc[i][j]
		}
	}
}
