//go:build amd64 && !purego

#include "textflag.h"

// The clamp of Pillow's clip8 is the two saturating packs: sums are never negative (the
// bilinear weights are not), so >> 22 then int32 → uint16 → uint8 saturation is min(v>>22, 255).

// func vrowAVX2(dst, src *uint8, stride, n int, k *int32, taps int)
TEXT ·vrowAVX2(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ stride+16(FP), DX
	MOVQ n+24(FP), CX
	MOVQ k+32(FP), R8
	MOVQ taps+40(FP), R9
	MOVL $0x200000, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15

vloop:
	VMOVDQU Y15, Y0
	VMOVDQU Y15, Y1
	MOVQ SI, R10
	MOVQ R8, R11
	MOVQ R9, R12

vtap:
	VPBROADCASTD (R11), Y2
	VPMOVZXBD (R10), Y3
	VPMOVZXBD 8(R10), Y4
	VPMULLD Y2, Y3, Y3
	VPMULLD Y2, Y4, Y4
	VPADDD Y3, Y0, Y0
	VPADDD Y4, Y1, Y1
	ADDQ DX, R10
	ADDQ $4, R11
	DECQ R12
	JNZ vtap

	VPSRAD $22, Y0, Y0
	VPSRAD $22, Y1, Y1
	VPACKUSDW Y1, Y0, Y0
	VPERMQ $0xD8, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPACKUSWB X1, X0, X0
	VMOVDQU X0, (DI)
	ADDQ $16, SI
	ADDQ $16, DI
	SUBQ $16, CX
	JNZ vloop
	VZEROUPPER
	RET

// Two outputs per iteration, one in each 128-bit lane: a tap loads both source pixels' four
// bytes (r, g, b and the next pixel's r, whose product is dropped) and multiplies them by
// the pair's expanded weights.

// func hrow3AVX2(dst, src *uint8, start *int32, kx *int32, pairs, taps int)
TEXT ·hrow3AVX2(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ start+16(FP), BX
	MOVQ kx+24(FP), R8
	MOVQ pairs+32(FP), CX
	MOVQ taps+40(FP), R9
	MOVL $0x200000, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15
	VMOVDQU rgbOfTwo<>(SB), X14

hloop:
	MOVLQSX (BX), R10
	MOVLQSX 4(BX), R11
	LEAQ (R10)(R10*2), R10
	LEAQ (R11)(R11*2), R11
	ADDQ SI, R10
	ADDQ SI, R11
	VMOVDQU Y15, Y0
	MOVQ R9, R12

htap:
	VMOVD (R10), X1
	VPINSRD $1, (R11), X1, X1
	VPMOVZXBD X1, Y1
	VPMULLD (R8), Y1, Y1
	VPADDD Y1, Y0, Y0
	ADDQ $3, R10
	ADDQ $3, R11
	ADDQ $32, R8
	DECQ R12
	JNZ htap

	VPSRAD $22, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPACKUSDW X1, X0, X0
	VPACKUSWB X0, X0, X0
	VPSHUFB X14, X0, X0
	VMOVD X0, AX
	MOVL AX, (DI)
	VPEXTRW $2, X0, AX
	MOVW AX, 4(DI)
	ADDQ $8, BX
	ADDQ $6, DI
	DECQ CX
	JNZ hloop
	VZEROUPPER
	RET

// rgbOfTwo picks bytes 0–2 and 4–6: the two pixels' r, g, b without the dropped fourth.
DATA rgbOfTwo<>+0(SB)/8, $0x8080060504020100
DATA rgbOfTwo<>+8(SB)/8, $0x8080808080808080
GLOBL rgbOfTwo<>(SB), RODATA|NOPTR, $16

// func sumTapsAVX2(acc *uint64, n int, ptrs *unsafe.Pointer, q *uint64, r int, round uint64)
// acc[i] = round + q[0]·c₀[i] + Σ_t q[t]·(c₋ₜ[i] + cₜ[i]) for i < n (a positive multiple of 4),
// where cₜ starts at ptrs[r+t]: sumTaps on 32-bit lanes, which is what its uint64 arithmetic
// computes (no lane ever carries into the next).
TEXT ·sumTapsAVX2(SB), NOSPLIT, $0-48
	MOVQ acc+0(FP), DI
	MOVQ n+8(FP), CX
	MOVQ ptrs+16(FP), SI
	MOVQ q+24(FP), R8
	MOVQ r+32(FP), R9
	VPBROADCASTQ round+40(FP), Y15
	LEAQ (SI)(R9*8), BX // &ptrs[r], the centre
	XORQ AX, AX         // byte offset into every row

bloop:
	MOVQ (BX), R10
	VMOVDQU (R10)(AX*1), Y1
	VPBROADCASTD (R8), Y2
	VPMULLD Y2, Y1, Y1
	VPADDD Y15, Y1, Y0
	MOVQ $1, R11

btap:
	MOVQ R11, R12
	NEGQ R12
	MOVQ (BX)(R12*8), R10
	MOVQ (BX)(R11*8), R13
	VMOVDQU (R10)(AX*1), Y1
	VPADDD (R13)(AX*1), Y1, Y1
	VPBROADCASTD (R8)(R11*8), Y2
	VPMULLD Y2, Y1, Y1
	VPADDD Y1, Y0, Y0
	INCQ R11
	CMPQ R11, R9
	JLE btap

	VMOVDQU Y0, (DI)(AX*1)
	ADDQ $32, AX
	SUBQ $4, CX
	JNZ bloop
	VZEROUPPER
	RET
