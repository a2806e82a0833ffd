// Command asmgen writes microkernel_amd64.s, the amd64 assembly of package kernels: the
// packed GEMM micro-kernels (AVX2 6×16, AVX-512 12×32), the indirect convolution kernels, the
// masked gather used to pack kernel-gradient operands, the FMA peak loops, the element-wise
// loops and the transforms of Winograd's F(2×2, 3×3) and F(3×3, 2×2). The kernels are
// fully unrolled register tiles, regular enough that generating them is clearer (and safer to
// change) than editing their thousands of lines by hand.
//
// Usage (from gpu/kernels, through go generate): go run ./internal/asmgen -out microkernel_amd64.s
package main

import (
	"bytes"
	"flag"
	"fmt"
	"log"
	"os"
)

type asm struct{ bytes.Buffer }

func (a *asm) l(format string, args ...any) {
	fmt.Fprintf(&a.Buffer, format, args...)
	a.WriteByte('\n')
}

// vec is one vector width: register prefix and bytes per register.
type vec struct {
	reg   string // "Y" or "Z"
	bytes int
}

var (
	ymm = vec{"Y", 32}
	zmm = vec{"Z", 64}
)

// zero clears registers first..last.
func (a *asm) zero(v vec, first, last int) {
	for r := first; r <= last; r++ {
		if v.reg == "Z" {
			a.l("\tVPXORD Z%d, Z%d, Z%d", r, r, r)
		} else {
			a.l("\tVXORPS Y%d, Y%d, Y%d", r, r, r)
		}
	}
}

// gemm writes C[mr×nr] += A·B over packed panels: a is [kc][mr], b is [kc][nr]. Registers: B in
// vec 0..nb-1, broadcasts in bcast, the tile from acc (nb registers per row).
func (a *asm) gemm(name string, v vec, mr, acc int, bcast []int, unroll int) {
	nb := 2
	a.l("// func %s(kc int, a, b, c unsafe.Pointer, ldc int)", name)
	a.l("// C[%d×%d] += A·B: a is [kc][%d], b is [kc][%d], c row-major with row stride ldc floats.", mr, nb*v.bytes/4, mr, nb*v.bytes/4)
	a.l("TEXT ·%s(SB), NOSPLIT, $0-40", name)
	a.l("\tMOVQ kc+0(FP), CX")
	a.l("\tMOVQ a+8(FP), SI")
	a.l("\tMOVQ b+16(FP), DI")
	a.l("\tMOVQ c+24(FP), DX")
	a.l("\tMOVQ ldc+32(FP), R8")
	a.l("\tSHLQ $2, R8")
	a.zero(v, acc, acc+mr*nb-1)
	// The tile of C is read only after the loop: fetching its lines now hides that miss.
	a.l("\tMOVQ DX, R10")
	for i := range mr {
		a.l("\tPREFETCHT0 (R10)")
		a.l("\tPREFETCHT0 %d(R10)", nb*v.bytes-4)
		if i < mr-1 {
			a.l("\tADDQ R8, R10")
		}
	}
	a.l("\tTESTQ CX, CX")
	a.l("\tJZ %s_store", name)
	step := func(aoff, boff int) {
		for j := range nb {
			a.l("\tVMOVUPS %d(DI), %s%d", boff+j*v.bytes, v.reg, j)
		}
		for i := range mr {
			t := bcast[i%len(bcast)]
			a.l("\tVBROADCASTSS %d(SI), %s%d", aoff+4*i, v.reg, t)
			for j := range nb {
				a.l("\tVFMADD231PS %s%d, %s%d, %s%d", v.reg, j, v.reg, t, v.reg, acc+i*nb+j)
			}
		}
	}
	a.l("\tMOVQ CX, R9")
	a.l("\tSHRQ $%d, R9", log2(unroll))
	a.l("\tJZ %s_tail", name)
	a.l("%s_loop:", name)
	for u := range unroll {
		step(u*4*mr, u*nb*v.bytes)
	}
	// A's panel streams from L2: ask for the lines four iterations ahead.
	a.l("\tPREFETCHT0 %d(SI)", 4*unroll*4*mr)
	a.l("\tADDQ $%d, SI", unroll*4*mr)
	a.l("\tADDQ $%d, DI", unroll*nb*v.bytes)
	a.l("\tDECQ R9")
	a.l("\tJNZ %s_loop", name)
	a.l("%s_tail:", name)
	a.l("\tANDQ $%d, CX", unroll-1)
	a.l("\tJZ %s_store", name)
	a.l("%s_loop1:", name)
	step(0, 0)
	a.l("\tADDQ $%d, SI", 4*mr)
	a.l("\tADDQ $%d, DI", nb*v.bytes)
	a.l("\tDECQ CX")
	a.l("\tJNZ %s_loop1", name)
	a.store(name, v, mr, nb, acc)
}

// store adds the tile to C (DX, row stride R8 bytes) and returns.
func (a *asm) store(name string, v vec, mr, nb, acc int) {
	a.l("%s_store:", name)
	for i := range mr {
		for j := range nb {
			r := acc + i*nb + j
			a.l("\tVADDPS %d(DX), %s%d, %s%d", j*v.bytes, v.reg, r, v.reg, r)
			a.l("\tVMOVUPS %s%d, %d(DX)", v.reg, r, j*v.bytes)
		}
		if i < mr-1 {
			a.l("\tADDQ R8, DX")
		}
	}
	a.l("\tVZEROUPPER")
	a.l("\tRET")
	a.l("")
}

// indirect writes the indirect convolution kernel: A's rows are read in place through offsets.
func (a *asm) indirect(name string, v vec, rows []string, acc int, bcast []int) {
	mr, nb := len(rows), 2
	a.l("// func %s(nseg, kc int, offs *int64, x, zero, b, c unsafe.Pointer, ldc int)", name)
	a.l("// C[%d×%d] += Σ over nseg segments of A_seg·B_seg, where row i of A_seg is the kc floats ending at", mr, nb*v.bytes/4)
	a.l("// x + 4·offs[seg·%d+i] (zero's kc floats when that offset is negative) and B_seg is the next kc", mr)
	a.l("// rows of b, packed [kc][%d]. The k loop runs an index from -kc to 0 on end pointers.", nb*v.bytes/4)
	a.l("TEXT ·%s(SB), NOSPLIT, $0-64", name)
	a.zero(v, acc, acc+mr*nb-1)
	a.l("\tCMPQ nseg+0(FP), $0")
	a.l("\tJEQ %s_store_prep", name)
	a.l("%s_seg:", name)
	a.l("\tMOVQ offs+16(FP), R14")
	a.l("\tMOVQ x+24(FP), R15")
	for i, r := range rows {
		a.l("\tMOVQ %d(R14), %s", 8*i, r)
		a.l("\tTESTQ %s, %s", r, r)
		a.l("\tLEAQ (R15)(%s*4), %s", r, r)
		a.l("\tCMOVQLT zero+32(FP), %s", r)
	}
	a.l("\tADDQ $%d, offs+16(FP)", 8*mr)
	a.l("\tMOVQ b+40(FP), R15")
	a.l("\tMOVQ kc+8(FP), R14")
	a.l("\tNEGQ R14")
	a.l("\tJEQ %s_next", name)
	a.l("%s_k:", name)
	for j := range nb {
		a.l("\tVMOVUPS %d(R15), %s%d", j*v.bytes, v.reg, j)
	}
	for i, r := range rows {
		t := bcast[i%len(bcast)]
		a.l("\tVBROADCASTSS (%s)(R14*4), %s%d", r, v.reg, t)
		for j := range nb {
			a.l("\tVFMADD231PS %s%d, %s%d, %s%d", v.reg, j, v.reg, t, v.reg, acc+i*nb+j)
		}
	}
	a.l("\tADDQ $%d, R15", nb*v.bytes)
	a.l("\tINCQ R14")
	a.l("\tJNZ %s_k", name)
	a.l("%s_next:", name)
	a.l("\tMOVQ R15, b+40(FP)")
	a.l("\tDECQ nseg+0(FP)")
	a.l("\tJNZ %s_seg", name)
	a.l("%s_store_prep:", name)
	a.l("\tMOVQ c+48(FP), DX")
	a.l("\tMOVQ ldc+56(FP), R8")
	a.l("\tSHLQ $2, R8")
	a.store(name, v, mr, nb, acc)
}

// peak writes a loop of independent FMAs: chains accumulators, iters iterations.
func (a *asm) peak(name string, v vec, first, chains int) {
	a.l("// func %s(iters int)", name)
	a.l("// %d independent chains of %d-wide FMAs per iteration: enough to fill two FMA pipes.", chains, v.bytes/4)
	a.l("TEXT ·%s(SB), NOSPLIT, $0-8", name)
	a.l("\tMOVQ iters+0(FP), CX")
	a.zero(v, 0, first+chains-1)
	a.l("\tTESTQ CX, CX")
	a.l("\tJZ %s_done", name)
	a.l("%s_loop:", name)
	for r := first; r < first+chains; r++ {
		a.l("\tVFMADD231PS %s0, %s1, %s%d", v.reg, v.reg, v.reg, r)
	}
	a.l("\tDECQ CX")
	a.l("\tJNZ %s_loop", name)
	a.l("%s_done:", name)
	a.l("\tVZEROUPPER")
	a.l("\tRET")
	a.l("")
}

// gather writes the masked run copy used to pack kernel-gradient operands.
func (a *asm) gather(name string) {
	a.l("// func %s(dst *float32, w int, x *float32, offs *int64, kc, n int)", name)
	a.l("// For p in [0, kc): dst[p·w : p·w+n] = x[offs[p] : offs[p]+n], or zeros where offs[p] < 0;")
	a.l("// n ≤ 16 (one masked 16-float move each).")
	a.l("TEXT ·%s(SB), NOSPLIT, $0-48", name)
	a.l("\tMOVQ dst+0(FP), DI")
	a.l("\tMOVQ w+8(FP), R8")
	a.l("\tSHLQ $2, R8")
	a.l("\tMOVQ x+16(FP), SI")
	a.l("\tMOVQ offs+24(FP), BX")
	a.l("\tMOVQ n+40(FP), CX")
	a.l("\tMOVQ $1, DX")
	a.l("\tSHLQ CX, DX")
	a.l("\tDECQ DX")
	a.l("\tKMOVW DX, K1")
	a.l("\tMOVQ kc+32(FP), CX")
	a.l("\tVPXORD Z1, Z1, Z1")
	a.l("\tTESTQ CX, CX")
	a.l("\tJEQ %s_done", name)
	a.l("%s_loop:", name)
	a.l("\tMOVQ (BX), DX")
	a.l("\tTESTQ DX, DX")
	a.l("\tJLT %s_zero", name)
	a.l("\tVMOVUPS.Z (SI)(DX*4), K1, Z0")
	a.l("\tVMOVUPS Z0, K1, (DI)")
	a.l("\tJMP %s_next", name)
	a.l("%s_zero:", name)
	a.l("\tVMOVUPS Z1, K1, (DI)")
	a.l("%s_next:", name)
	a.l("\tADDQ $8, BX")
	a.l("\tADDQ R8, DI")
	a.l("\tDECQ CX")
	a.l("\tJNZ %s_loop", name)
	a.l("%s_done:", name)
	a.l("\tVZEROUPPER")
	a.l("\tRET")
}

// vecBinary writes dst[i] = a[i] op b[i] (or a[i] op s with a scalar) over n floats, n a
// multiple of 8, 8 floats (one ymm register) at a time. nanFix makes max and min return NaN
// when either operand is NaN, as Go's builtins do (VMAXPS returns its second operand).
func (a *asm) vecBinary(name, instr string, scalar, nanFix bool) {
	if scalar {
		a.l("// func %s(dst, x *float32, s float32, n int)", name)
		a.l("TEXT ·%s(SB), NOSPLIT, $0-32", name)
		a.l("\tMOVQ dst+0(FP), DI")
		a.l("\tMOVQ x+8(FP), SI")
		a.l("\tVBROADCASTSS s+16(FP), Y1")
		a.l("\tMOVQ n+24(FP), CX")
	} else {
		a.l("// func %s(dst, x, y *float32, n int)", name)
		a.l("TEXT ·%s(SB), NOSPLIT, $0-32", name)
		a.l("\tMOVQ dst+0(FP), DI")
		a.l("\tMOVQ x+8(FP), SI")
		a.l("\tMOVQ y+16(FP), DX")
		a.l("\tMOVQ n+24(FP), CX")
	}
	a.l("\tSHRQ $3, CX")
	a.l("\tJZ %s_done", name)
	a.l("%s_loop:", name)
	a.l("\tVMOVUPS (SI), Y0")
	if !scalar {
		a.l("\tVMOVUPS (DX), Y1")
	}
	// Go operand order: INSTR src2, src1, dst computes dst = src1 op src2.
	a.l("\t%s Y1, Y0, Y2", instr)
	if nanFix {
		a.l("\tVCMPPS $3, Y1, Y0, Y3") // unordered: either is NaN
		a.l("\tVADDPS Y1, Y0, Y4")     // NaN where either is
		a.l("\tVBLENDVPS Y3, Y4, Y2, Y2")
	}
	a.l("\tVMOVUPS Y2, (DI)")
	a.l("\tADDQ $32, SI")
	if !scalar {
		a.l("\tADDQ $32, DX")
	}
	a.l("\tADDQ $32, DI")
	a.l("\tDECQ CX")
	a.l("\tJNZ %s_loop", name)
	a.l("%s_done:", name)
	a.l("\tVZEROUPPER")
	a.l("\tRET")
	a.l("")
}

// vecScalarFirst writes dst[i] = s op x[i] (the scalar on the left) for sub and div.
func (a *asm) vecScalarFirst(name, instr string) {
	a.l("// func %s(dst, x *float32, s float32, n int)", name)
	a.l("TEXT ·%s(SB), NOSPLIT, $0-32", name)
	a.l("\tMOVQ dst+0(FP), DI")
	a.l("\tMOVQ x+8(FP), SI")
	a.l("\tVBROADCASTSS s+16(FP), Y1")
	a.l("\tMOVQ n+24(FP), CX")
	a.l("\tSHRQ $3, CX")
	a.l("\tJZ %s_done", name)
	a.l("%s_loop:", name)
	a.l("\tVMOVUPS (SI), Y0")
	a.l("\t%s Y0, Y1, Y2", instr)
	a.l("\tVMOVUPS Y2, (DI)")
	a.l("\tADDQ $32, SI")
	a.l("\tADDQ $32, DI")
	a.l("\tDECQ CX")
	a.l("\tJNZ %s_loop", name)
	a.l("%s_done:", name)
	a.l("\tVZEROUPPER")
	a.l("\tRET")
	a.l("")
}

// vecSign writes dst[i] = ±1 with x[i]'s sign, x[i] itself for ±0 and NaN.
func (a *asm) vecSign(name string) {
	a.l("// func %s(dst, x *float32, n int)", name)
	a.l("TEXT ·%s(SB), NOSPLIT, $0-24", name)
	a.l("\tMOVQ dst+0(FP), DI")
	a.l("\tMOVQ x+8(FP), SI")
	a.l("\tMOVQ n+16(FP), CX")
	a.l("\tMOVL $0x80000000, AX")
	a.l("\tVMOVD AX, X7")
	a.l("\tVPBROADCASTD X7, Y7")
	a.l("\tMOVL $0x3f800000, AX")
	a.l("\tVMOVD AX, X8")
	a.l("\tVPBROADCASTD X8, Y8")
	a.l("\tVXORPS Y9, Y9, Y9")
	a.l("\tSHRQ $3, CX")
	a.l("\tJZ %s_done", name)
	a.l("%s_loop:", name)
	a.l("\tVMOVUPS (SI), Y0")
	a.l("\tVANDPS Y7, Y0, Y1")
	a.l("\tVORPS Y8, Y1, Y1")      // ±1
	a.l("\tVCMPPS $0, Y9, Y0, Y2") // x == 0
	a.l("\tVCMPPS $3, Y0, Y0, Y3") // x is NaN
	a.l("\tVORPS Y3, Y2, Y2")
	a.l("\tVBLENDVPS Y2, Y0, Y1, Y1") // keep x where zero or NaN
	a.l("\tVMOVUPS Y1, (DI)")
	a.l("\tADDQ $32, SI")
	a.l("\tADDQ $32, DI")
	a.l("\tDECQ CX")
	a.l("\tJNZ %s_loop", name)
	a.l("%s_done:", name)
	a.l("\tVZEROUPPER")
	a.l("\tRET")
	a.l("")
}

// vecAffine writes dst[i] = x[i]·m[i] + c[i] (a multiply then an add, rounded as Go does).
func (a *asm) vecAffine(name string) {
	a.l("// func %s(dst, x, m, c *float32, n int)", name)
	a.l("TEXT ·%s(SB), NOSPLIT, $0-40", name)
	a.l("\tMOVQ dst+0(FP), DI")
	a.l("\tMOVQ x+8(FP), SI")
	a.l("\tMOVQ m+16(FP), DX")
	a.l("\tMOVQ c+24(FP), BX")
	a.l("\tMOVQ n+32(FP), CX")
	a.l("\tSHRQ $3, CX")
	a.l("\tJZ %s_done", name)
	a.l("%s_loop:", name)
	a.l("\tVMOVUPS (SI), Y0")
	a.l("\tVMULPS (DX), Y0, Y0")
	a.l("\tVADDPS (BX), Y0, Y0")
	a.l("\tVMOVUPS Y0, (DI)")
	a.l("\tADDQ $32, SI")
	a.l("\tADDQ $32, DX")
	a.l("\tADDQ $32, BX")
	a.l("\tADDQ $32, DI")
	a.l("\tDECQ CX")
	a.l("\tJNZ %s_loop", name)
	a.l("%s_done:", name)
	a.l("\tVZEROUPPER")
	a.l("\tRET")
	a.l("")
}

// channelSums adds rows of x into per-channel sums over the first n channels (a multiple of 8),
// eight channels per step, the sums staying in L1 while x streams once: plain, t1[c] += x[r][c]
// and t2[c] += x[r][c]·x[r][c]; centred, t1[c] += y[r][c] and t2[c] += (x[r][c] −
// center[c])·y[r][c]. Each is a separate multiply and add (no FMA), rounded as the element-wise
// loops round, rows in order; stride is the row stride in floats.
func (a *asm) channelSums(name string, centred bool) {
	if centred {
		a.l("// func %s(t1, t2, x, y, center *float32, stride, n, rows int)", name)
		a.l("TEXT ·%s(SB), NOSPLIT, $0-64", name)
		a.l("\tMOVQ t1+0(FP), DI")
		a.l("\tMOVQ t2+8(FP), BX")
		a.l("\tMOVQ x+16(FP), SI")
		a.l("\tMOVQ y+24(FP), DX")
		a.l("\tMOVQ center+32(FP), R13")
		a.l("\tMOVQ stride+40(FP), R12")
		a.l("\tMOVQ n+48(FP), R8")
		a.l("\tMOVQ rows+56(FP), R9")
	} else {
		a.l("// func %s(t1, t2, x *float32, stride, n, rows int)", name)
		a.l("TEXT ·%s(SB), NOSPLIT, $0-48", name)
		a.l("\tMOVQ t1+0(FP), DI")
		a.l("\tMOVQ t2+8(FP), BX")
		a.l("\tMOVQ x+16(FP), SI")
		a.l("\tMOVQ stride+24(FP), R12")
		a.l("\tMOVQ n+32(FP), R8")
		a.l("\tMOVQ rows+40(FP), R9")
	}
	a.l("\tSHLQ $2, R12")
	a.l("\tSHLQ $2, R8")
	a.l("\tTESTQ R8, R8")
	a.l("\tJZ %s_done", name)
	a.l("\tTESTQ R9, R9")
	a.l("\tJZ %s_done", name)
	a.l("%s_row:", name)
	a.l("\tXORQ R10, R10")
	a.l("%s_chunk:", name)
	if centred {
		a.l("\tVMOVUPS (DX)(R10*1), Y3")
		a.l("\tVADDPS (DI)(R10*1), Y3, Y1")
		a.l("\tVMOVUPS Y1, (DI)(R10*1)")
		a.l("\tVMOVUPS (SI)(R10*1), Y0")
		a.l("\tVSUBPS (R13)(R10*1), Y0, Y2")
		a.l("\tVMULPS Y3, Y2, Y2")
	} else {
		a.l("\tVMOVUPS (SI)(R10*1), Y0")
		a.l("\tVADDPS (DI)(R10*1), Y0, Y1")
		a.l("\tVMOVUPS Y1, (DI)(R10*1)")
		a.l("\tVMULPS Y0, Y0, Y2")
	}
	a.l("\tVADDPS (BX)(R10*1), Y2, Y2")
	a.l("\tVMOVUPS Y2, (BX)(R10*1)")
	a.l("\tADDQ $32, R10")
	a.l("\tCMPQ R10, R8")
	a.l("\tJLT %s_chunk", name)
	a.l("\tADDQ R12, SI")
	if centred {
		a.l("\tADDQ R12, DX")
	}
	a.l("\tDECQ R9")
	a.l("\tJNZ %s_row", name)
	a.l("%s_done:", name)
	a.l("\tVZEROUPPER")
	a.l("\tRET")
	a.l("")
}

// winogradInput writes Winograd F(2×2, 3×3)'s input transform V = Bᵀ·d·B, eight channels per
// step, for tiles tiles: tile t's 4×4 block of channel vectors d[r][col] starts at
// ptrs[16·t + 4·r + col] (c floats each), and V[k] (k = 4·r + col) goes to
// dst + 4·(t·c + k·plane). Bᵀ's rows are (1, 0, −1, 0), (0, 1, 1, 0), (0, −1, 1, 0),
// (0, 1, 0, −1): additions only, exact up to their rounding. The column pass leaves t[r][col]
// = (Bᵀ·d)[r][col] in Y(4·col + r); the row pass reuses those registers in place.
func (a *asm) winogradInput(name string) {
	a.l("// func %s(ptrs *unsafe.Pointer, tiles, c int, dst unsafe.Pointer, plane int)", name)
	a.l("TEXT ·%s(SB), NOSPLIT, $0-40", name)
	a.l("\tMOVQ ptrs+0(FP), AX")
	a.l("\tMOVQ tiles+8(FP), BX")
	a.l("\tMOVQ c+16(FP), CX")
	a.l("\tSHLQ $2, CX")
	a.l("\tMOVQ dst+24(FP), DX")
	a.l("\tMOVQ plane+32(FP), R8")
	a.l("\tSHLQ $2, R8")
	a.l("\tLEAQ (R8)(R8*2), R12") // 3·plane
	a.l("\tMOVQ R8, R13")
	a.l("\tSHLQ $2, R13") // 4·plane
	a.tileLoop(name, 128, func() {
		for col := range 4 {
			for r := range 4 {
				a.l("\tMOVQ %d(AX), R10", 8*(4*r+col))
				a.l("\tVMOVUPS (R10)(R9*1), Y%d", 4*col+r)
			}
			d0, d1, d2, d3 := 4*col, 4*col+1, 4*col+2, 4*col+3
			a.l("\tVSUBPS Y%d, Y%d, Y%d", d2, d0, d0) // t0 = d0 − d2
			a.l("\tVSUBPS Y%d, Y%d, Y%d", d3, d1, d3) // t3 = d1 − d3
			a.l("\tVSUBPS Y%d, Y%d, Y%d", d1, d2, d2) // t2 = d2 − d1
			a.l("\tMOVQ %d(AX), R10", 8*(8+col))
			a.l("\tVADDPS (R10)(R9*1), Y%d, Y%d", d1, d1) // t1 = d1 + d2 (d2 reloaded)
		}
		a.l("\tLEAQ (DX)(R9*1), R11")
		for r := range 4 {
			t0, t1, t2, t3 := r, 4+r, 8+r, 12+r
			a.l("\tVSUBPS Y%d, Y%d, Y%d", t2, t0, t0) // v0 = t0 − t2
			a.l("\tVMOVUPS Y%d, (R11)", t0)
			a.l("\tVSUBPS Y%d, Y%d, Y%d", t3, t1, t3) // v3 = t1 − t3
			a.l("\tVMOVUPS Y%d, (R11)(R12*1)", t3)
			a.l("\tVADDPS Y%d, Y%d, Y%d", t2, t1, t0) // v1 = t1 + t2
			a.l("\tVMOVUPS Y%d, (R11)(R8*1)", t0)
			a.l("\tVSUBPS Y%d, Y%d, Y%d", t1, t2, t2) // v2 = t2 − t1
			a.l("\tVMOVUPS Y%d, (R11)(R8*2)", t2)
			if r < 3 {
				a.l("\tADDQ R13, R11")
			}
		}
	})
}

// winogradOutput writes Winograd F(2×2, 3×3)'s output transform Y = Aᵀ·m·A, eight channels per
// step, for tiles tiles: m[r][col] (k = 4·r + col) is at src + 4·(t·c + k·plane), and Y[i][j]
// goes to ptrs[4·t + 2·i + j] (c floats each). Aᵀ's rows are (1, 1, 1, 0) and (0, 1, −1, −1).
// The column pass leaves s[i][col] = (Aᵀ·m)[i][col] in Y(2·col + i).
func (a *asm) winogradOutput(name string) {
	a.l("// func %s(src unsafe.Pointer, plane, tiles, c int, ptrs *unsafe.Pointer)", name)
	a.l("TEXT ·%s(SB), NOSPLIT, $0-40", name)
	a.l("\tMOVQ src+0(FP), DX")
	a.l("\tMOVQ plane+8(FP), R8")
	a.l("\tSHLQ $2, R8")
	a.l("\tMOVQ tiles+16(FP), BX")
	a.l("\tMOVQ c+24(FP), CX")
	a.l("\tSHLQ $2, CX")
	a.l("\tMOVQ ptrs+32(FP), AX")
	a.l("\tMOVQ R8, R12")
	a.l("\tSHLQ $2, R12")           // 4·plane
	a.l("\tLEAQ (R12)(R12*2), R13") // 12·plane
	a.tileLoop(name, 32, func() {
		a.l("\tLEAQ (DX)(R9*1), R11")
		for col := range 4 {
			s0, s1 := 2*col, 2*col+1
			a.l("\tVMOVUPS (R11), Y%d", s0)
			a.l("\tVMOVUPS (R11)(R12*1), Y%d", s1)
			a.l("\tVMOVUPS (R11)(R12*2), Y8")
			a.l("\tVMOVUPS (R11)(R13*1), Y9")
			a.l("\tVADDPS Y%d, Y%d, Y%d", s1, s0, s0) // m0 + m1
			a.l("\tVSUBPS Y8, Y%d, Y%d", s1, s1)      // m1 − m2
			a.l("\tVADDPS Y8, Y%d, Y%d", s0, s0)      // s0 = m0 + m1 + m2
			a.l("\tVSUBPS Y9, Y%d, Y%d", s1, s1)      // s1 = m1 − m2 − m3
			if col < 3 {
				a.l("\tADDQ R8, R11")
			}
		}
		for i := range 2 {
			a.l("\tVADDPS Y%d, Y%d, Y10", 2+i, i)
			a.l("\tVADDPS Y%d, Y10, Y10", 4+i)
			a.l("\tMOVQ %d(AX), R10", 8*(2*i))
			a.l("\tVMOVUPS Y10, (R10)(R9*1)")
			a.l("\tVSUBPS Y%d, Y%d, Y11", 4+i, 2+i)
			a.l("\tVSUBPS Y%d, Y11, Y11", 6+i)
			a.l("\tMOVQ %d(AX), R10", 8*(2*i+1))
			a.l("\tVMOVUPS Y11, (R10)(R9*1)")
		}
	})
}

// winogradKernel writes Winograd F(2×2, 3×3)'s kernel transform U = G·g·Gᵀ for n output
// channels (a multiple of 8), eight per step: g[a][b] is at src[3·a + b] (n floats each) and
// U[k] goes to dst + 4·k·plane. G's rows are (1, 0, 0), (½, ½, ½), (½, −½, ½), (0, 0, 1).
// Registers: g[a][b] in Y(3·a + b), one row of G·g in Y9..Y11, ½ in Y15.
func (a *asm) winogradKernel(name string) {
	a.l("// func %s(src *unsafe.Pointer, n int, dst unsafe.Pointer, plane int)", name)
	a.l("TEXT ·%s(SB), NOSPLIT, $0-32", name)
	a.l("\tMOVQ src+0(FP), AX")
	a.l("\tMOVQ n+8(FP), CX")
	a.l("\tSHLQ $2, CX")
	a.l("\tMOVQ dst+16(FP), DX")
	a.l("\tMOVQ plane+24(FP), R8")
	a.l("\tSHLQ $2, R8")
	a.l("\tLEAQ (R8)(R8*2), R12") // 3·plane
	a.l("\tMOVQ R8, R13")
	a.l("\tSHLQ $2, R13")         // 4·plane
	a.l("\tMOVL $0x3f000000, BX") // ½
	a.l("\tMOVL BX, X15")
	a.l("\tVBROADCASTSS X15, Y15")
	a.l("\tTESTQ CX, CX")
	a.l("\tJZ %s_done", name)
	a.l("\tXORQ R9, R9")
	a.l("%s_chunk:", name)
	for i := range 9 {
		a.l("\tMOVQ %d(AX), R10", 8*i)
		a.l("\tVMOVUPS (R10)(R9*1), Y%d", i)
	}
	a.l("\tLEAQ (DX)(R9*1), R11")
	// row writes one row t0, t1, t2 of G·g as U's row i: t0, ½(t0+t1+t2), ½(t0−t1+t2), t2.
	row := func(t0, t1, t2 int, last bool) {
		a.l("\tVMOVUPS Y%d, (R11)", t0)
		a.l("\tVADDPS Y%d, Y%d, Y12", t2, t0)
		a.l("\tVADDPS Y%d, Y12, Y13", t1)
		a.l("\tVMULPS Y15, Y13, Y13")
		a.l("\tVMOVUPS Y13, (R11)(R8*1)")
		a.l("\tVSUBPS Y%d, Y12, Y12", t1)
		a.l("\tVMULPS Y15, Y12, Y12")
		a.l("\tVMOVUPS Y12, (R11)(R8*2)")
		a.l("\tVMOVUPS Y%d, (R11)(R12*1)", t2)
		if !last {
			a.l("\tADDQ R13, R11")
		}
	}
	row(0, 1, 2, false) // G's row (1, 0, 0): g's row 0
	for j := range 3 {  // ½(g0 + g1 + g2)
		a.l("\tVADDPS Y%d, Y%d, Y%d", 6+j, j, 9+j)
		a.l("\tVADDPS Y%d, Y%d, Y%d", 3+j, 9+j, 9+j)
		a.l("\tVMULPS Y15, Y%d, Y%d", 9+j, 9+j)
	}
	row(9, 10, 11, false)
	for j := range 3 { // ½(g0 − g1 + g2)
		a.l("\tVADDPS Y%d, Y%d, Y%d", 6+j, j, 9+j)
		a.l("\tVSUBPS Y%d, Y%d, Y%d", 3+j, 9+j, 9+j)
		a.l("\tVMULPS Y15, Y%d, Y%d", 9+j, 9+j)
	}
	row(9, 10, 11, false)
	row(6, 7, 8, true) // G's row (0, 0, 1): g's row 2
	a.l("\tADDQ $32, R9")
	a.l("\tCMPQ R9, CX")
	a.l("\tJLT %s_chunk", name)
	a.l("%s_done:", name)
	a.l("\tVZEROUPPER")
	a.l("\tRET")
	a.l("")
}

// winogradFilter writes Winograd F(3×3, 2×2)'s transform of 2×2 filter tiles, U = G·g·Gᵀ with
// G's rows (1, 0), (½, ½), (½, −½), (0, −1) (the last row negated so that winogradInput's Bᵀ
// serves this algorithm too), eight channels per step, for tiles tiles: g[r][s] is at
// ptrs[4·t + 2·r + s] (c floats each) and U[k] goes to dst + 4·(t·c + k·plane).
// Registers: g in Y0..Y3, one row of G·g in Y4, Y5, zero in Y14, ½ in Y15.
func (a *asm) winogradFilter(name string) {
	a.l("// func %s(ptrs *unsafe.Pointer, tiles, c int, dst unsafe.Pointer, plane int)", name)
	a.l("TEXT ·%s(SB), NOSPLIT, $0-40", name)
	a.l("\tMOVQ ptrs+0(FP), AX")
	a.l("\tMOVQ tiles+8(FP), BX")
	a.l("\tMOVQ c+16(FP), CX")
	a.l("\tSHLQ $2, CX")
	a.l("\tMOVQ dst+24(FP), DX")
	a.l("\tMOVQ plane+32(FP), R8")
	a.l("\tSHLQ $2, R8")
	a.l("\tLEAQ (R8)(R8*2), R12")
	a.l("\tMOVQ R8, R13")
	a.l("\tSHLQ $2, R13")
	a.l("\tMOVL $0x3f000000, R10")
	a.l("\tMOVL R10, X15")
	a.l("\tVBROADCASTSS X15, Y15")
	a.l("\tVXORPS Y14, Y14, Y14")
	a.tileLoop(name, 32, func() {
		for i := range 4 {
			a.l("\tMOVQ %d(AX), R10", 8*i)
			a.l("\tVMOVUPS (R10)(R9*1), Y%d", i)
		}
		a.l("\tLEAQ (DX)(R9*1), R11")
		// row writes U's row from one row (x0, x1) of G·g: x0, ½(x0+x1), ½(x0−x1), −x1.
		row := func(x0, x1 int, last bool) {
			a.l("\tVMOVUPS Y%d, (R11)", x0)
			a.l("\tVADDPS Y%d, Y%d, Y6", x1, x0)
			a.l("\tVMULPS Y15, Y6, Y6")
			a.l("\tVMOVUPS Y6, (R11)(R8*1)")
			a.l("\tVSUBPS Y%d, Y%d, Y7", x1, x0)
			a.l("\tVMULPS Y15, Y7, Y7")
			a.l("\tVMOVUPS Y7, (R11)(R8*2)")
			a.l("\tVSUBPS Y%d, Y14, Y6", x1)
			a.l("\tVMOVUPS Y6, (R11)(R12*1)")
			if !last {
				a.l("\tADDQ R13, R11")
			}
		}
		row(0, 1, false) // (1, 0): g's row 0
		a.l("\tVADDPS Y2, Y0, Y4")
		a.l("\tVMULPS Y15, Y4, Y4")
		a.l("\tVADDPS Y3, Y1, Y5")
		a.l("\tVMULPS Y15, Y5, Y5")
		row(4, 5, false) // (½, ½)
		a.l("\tVSUBPS Y2, Y0, Y4")
		a.l("\tVMULPS Y15, Y4, Y4")
		a.l("\tVSUBPS Y3, Y1, Y5")
		a.l("\tVMULPS Y15, Y5, Y5")
		row(4, 5, false) // (½, −½)
		a.l("\tVSUBPS Y2, Y14, Y4")
		a.l("\tVSUBPS Y3, Y14, Y5")
		row(4, 5, true) // (0, −1)
	})
}

// winogradGradOutput writes Winograd F(3×3, 2×2)'s output transform Y = Aᵀ·m·A for n channels
// (a multiple of 8), eight per step: m[r][col] (k = 4·r + col) is at src + 4·k·plane and Y[i][j]
// goes to ptrs[3·i + j]. Aᵀ's rows are (1, 1, 1, 0), (0, 1, −1, 0), (0, 1, 1, 1). The column
// pass leaves s[i][col] = (Aᵀ·m)[i][col] in Y(3·col + i).
func (a *asm) winogradGradOutput(name string) {
	a.l("// func %s(src unsafe.Pointer, plane, n int, ptrs *unsafe.Pointer)", name)
	a.l("TEXT ·%s(SB), NOSPLIT, $0-32", name)
	a.l("\tMOVQ src+0(FP), DX")
	a.l("\tMOVQ plane+8(FP), R8")
	a.l("\tSHLQ $2, R8")
	a.l("\tMOVQ n+16(FP), CX")
	a.l("\tSHLQ $2, CX")
	a.l("\tMOVQ ptrs+24(FP), AX")
	a.l("\tMOVQ R8, R12")
	a.l("\tSHLQ $2, R12")
	a.l("\tLEAQ (R12)(R12*2), R13")
	a.l("\tTESTQ CX, CX")
	a.l("\tJZ %s_done", name)
	a.l("\tXORQ R9, R9")
	a.l("%s_chunk:", name)
	a.l("\tLEAQ (DX)(R9*1), R11")
	for col := range 4 {
		a.l("\tVMOVUPS (R11)(R12*1), Y12")
		a.l("\tVMOVUPS (R11)(R12*2), Y13")
		a.l("\tVSUBPS Y13, Y12, Y%d", 3*col+1) // s1 = m1 − m2
		a.l("\tVADDPS Y13, Y12, Y12")
		a.l("\tVADDPS (R11), Y12, Y%d", 3*col)          // s0 = m0 + m1 + m2
		a.l("\tVADDPS (R11)(R13*1), Y12, Y%d", 3*col+2) // s2 = m1 + m2 + m3
		if col < 3 {
			a.l("\tADDQ R8, R11")
		}
	}
	for i := range 3 {
		s0, s1, s2, s3 := i, 3+i, 6+i, 9+i
		a.l("\tVADDPS Y%d, Y%d, Y13", s2, s1)
		a.l("\tVADDPS Y%d, Y13, Y12", s0)
		a.l("\tMOVQ %d(AX), R10", 8*(3*i))
		a.l("\tVMOVUPS Y12, (R10)(R9*1)")
		a.l("\tVSUBPS Y%d, Y%d, Y12", s2, s1)
		a.l("\tMOVQ %d(AX), R10", 8*(3*i+1))
		a.l("\tVMOVUPS Y12, (R10)(R9*1)")
		a.l("\tVADDPS Y%d, Y13, Y12", s3)
		a.l("\tMOVQ %d(AX), R10", 8*(3*i+2))
		a.l("\tVMOVUPS Y12, (R10)(R9*1)")
	}
	a.l("\tADDQ $32, R9")
	a.l("\tCMPQ R9, CX")
	a.l("\tJLT %s_chunk", name)
	a.l("%s_done:", name)
	a.l("\tVZEROUPPER")
	a.l("\tRET")
	a.l("")
}

// tileLoop writes the loops of the Winograd transforms around body: over tiles (BX of them,
// AX advancing by tileBytes, DX by CX) and, within a tile, over its channels eight at a time
// (R9 the byte offset, up to CX).
func (a *asm) tileLoop(name string, tileBytes int, body func()) {
	a.l("\tTESTQ BX, BX")
	a.l("\tJZ %s_done", name)
	a.l("%s_tile:", name)
	a.l("\tXORQ R9, R9")
	a.l("%s_chunk:", name)
	body()
	a.l("\tADDQ $32, R9")
	a.l("\tCMPQ R9, CX")
	a.l("\tJLT %s_chunk", name)
	a.l("\tADDQ $%d, AX", tileBytes)
	a.l("\tADDQ CX, DX")
	a.l("\tDECQ BX")
	a.l("\tJNZ %s_tile", name)
	a.l("%s_done:", name)
	a.l("\tVZEROUPPER")
	a.l("\tRET")
	a.l("")
}

func log2(n int) int {
	k := 0
	for 1<<k < n {
		k++
	}
	return k
}

func main() {
	out := flag.String("out", "microkernel_amd64.s", "output file")
	flag.Parse()
	var a asm
	a.l("// Code generated by internal/asmgen; DO NOT EDIT.")
	a.l("")
	a.l("//go:build amd64 && !purego")
	a.l("")
	a.l(`#include "textflag.h"`)
	a.l("")
	// AVX2 6×16: Y0,Y1 a row of B; Y2,Y3 broadcasts; Y4..Y15 the tile.
	a.gemm("gemmAVX2", ymm, 6, 4, []int{2, 3}, 4)
	// AVX-512 12×32: Z0,Z1 a row of B; Z2..Z7 broadcasts; Z8..Z31 the tile.
	a.gemm("gemmAVX512", zmm, 12, 8, []int{2, 3, 4, 5, 6, 7}, 2)
	a.peak("fmaPeakAVX2", ymm, 4, 12)
	a.peak("fmaPeakAVX512", zmm, 8, 24)
	a.indirect("convIndirectAVX512", zmm, []string{"AX", "BX", "CX", "DX", "SI", "DI", "R8", "R9", "R10", "R11", "R12", "R13"}, 8, []int{2, 3, 4, 5, 6, 7})
	a.indirect("convIndirectAVX2", ymm, []string{"AX", "BX", "CX", "DX", "SI", "DI"}, 4, []int{2, 3})
	a.gather("gatherRunsAVX512")
	a.l("")
	// Element-wise float32 loops (AVX2), 8 floats per step; Go handles the tails.
	for _, op := range []struct {
		name, instr string
		nanFix      bool
	}{{"Add", "VADDPS", false}, {"Sub", "VSUBPS", false}, {"Mul", "VMULPS", false}, {"Div", "VDIVPS", false},
		{"Max", "VMAXPS", true}, {"Min", "VMINPS", true}} {
		a.vecBinary("vec"+op.name+"AVX2", op.instr, false, op.nanFix)
		a.vecBinary("vec"+op.name+"ScalarAVX2", op.instr, true, op.nanFix)
	}
	a.vecScalarFirst("vecScalarSubAVX2", "VSUBPS")
	a.vecScalarFirst("vecScalarDivAVX2", "VDIVPS")
	a.vecSign("vecSignAVX2")
	a.vecAffine("vecAffineAVX2")
	a.channelSums("channelSumsAVX2", false)
	a.channelSums("channelSumsCentredAVX2", true)
	a.winogradInput("winogradInputAVX2")
	a.winogradOutput("winogradOutputAVX2")
	a.winogradKernel("winogradKernelAVX2")
	a.winogradFilter("winogradFilterAVX2")
	a.winogradGradOutput("winogradGradOutputAVX2")
	if err := os.WriteFile(*out, a.Bytes(), 0o644); err != nil {
		log.Fatal(err)
	}
}
