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

// func hueAVX2(pix *uint8, n int, d int32)
// hue on n pixels (a positive multiple of 8), eight per iteration in 32-bit lanes: the same
// sextant positions and rounding; the division by C is float32's, which is exact here (a
// quotient of integers below 1530 and 256 is never within float32's error of an integer it
// is not). A gray pixel (C = 0) comes out as it went in whatever sextant it gets: its four
// candidate values are all equal. Loads read four bytes past the 24 of a block; stores
// write exactly those 24.
TEXT ·hueAVX2(SB), NOSPLIT, $0-20
	MOVQ pix+0(FP), SI
	MOVQ n+8(FP), CX
	MOVL d+16(FP), AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15

hueloop:
	VMOVDQU (SI), X0
	VMOVDQU 12(SI), X1
	VINSERTI128 $1, X1, Y0, Y0
	VPSHUFB hueR<>(SB), Y0, Y1
	VPSHUFB hueG<>(SB), Y0, Y2
	VPSHUFB hueB<>(SB), Y0, Y3
	VPMAXSD Y2, Y1, Y4
	VPMAXSD Y3, Y4, Y4 // hi
	VPMINSD Y2, Y1, Y5
	VPMINSD Y3, Y5, Y5 // lo
	VPSUBD Y5, Y4, Y6  // C
	VPSLLD $1, Y6, Y7  // 2C
	VPSLLD $1, Y7, Y8  // 4C

	// The position within [0, 6C): from the channel that is the maximum (r before g before b).
	VPSUBD Y3, Y2, Y9 // g − b, + 6C when negative
	VPSRAD $31, Y9, Y10
	VPADDD Y7, Y8, Y11
	VPAND Y11, Y10, Y10
	VPADDD Y10, Y9, Y9
	VPSUBD Y1, Y3, Y10 // 2C + b − r
	VPADDD Y7, Y10, Y10
	VPSUBD Y2, Y1, Y11 // 4C + r − g
	VPADDD Y8, Y11, Y11
	VPCMPEQD Y2, Y4, Y13
	VPBLENDVB Y13, Y10, Y11, Y11
	VPCMPEQD Y1, Y4, Y12
	VPBLENDVB Y12, Y9, Y11, Y11

	// x = pos·2¹⁶ + d·C, brought into [0, 6C·2¹⁶).
	VPSLLD $16, Y11, Y11
	VPMULLD Y15, Y6, Y9
	VPADDD Y9, Y11, Y11
	VPADDD Y7, Y8, Y9
	VPSLLD $16, Y9, Y9 // the period
	VPSRAD $31, Y11, Y10
	VPAND Y9, Y10, Y10
	VPADDD Y10, Y11, Y11
	VPCMPGTD Y11, Y9, Y10
	VPANDN Y9, Y10, Y10
	VPSUBD Y10, Y11, Y11

	// sextant = ⌊(x >> 16) / C⌋, frac = x − sextant·C·2¹⁶.
	VPSRAD $16, Y11, Y10
	VCVTDQ2PS Y10, Y10
	VCVTDQ2PS Y6, Y9
	VDIVPS Y9, Y10, Y10
	VCVTTPS2DQ Y10, Y10
	VPSLLD $16, Y6, Y9
	VPMULLD Y10, Y9, Y9
	VPSUBD Y9, Y11, Y11
	VPSRAD $16, Y11, Y9 // rising = lo + frac >> 16
	VPADDD Y5, Y9, Y9
	VPBROADCASTD hueConst<>+24(SB), Y8
	VPADDD Y8, Y11, Y11
	VPSRAD $16, Y11, Y11
	VPSUBD Y11, Y4, Y11 // falling = hi − ⌈frac / 2¹⁶⌉

	// The sextants' masks, then each channel from hueSextants' column.
	VPXOR Y6, Y6, Y6
	VPCMPEQD Y6, Y10, Y6 // 0
	VPBROADCASTD hueConst<>+4(SB), Y0
	VPCMPEQD Y0, Y10, Y0 // 1
	VPBROADCASTD hueConst<>+8(SB), Y1
	VPCMPEQD Y1, Y10, Y1 // 2
	VPBROADCASTD hueConst<>+12(SB), Y2
	VPCMPEQD Y2, Y10, Y2 // 3
	VPBROADCASTD hueConst<>+16(SB), Y3
	VPCMPEQD Y3, Y10, Y3 // 4
	VPBROADCASTD hueConst<>+20(SB), Y7
	VPCMPEQD Y7, Y10, Y7 // 5

	VMOVDQU Y4, Y8 // r: hi, falling, lo, lo, rising, hi
	VPBLENDVB Y0, Y11, Y8, Y8
	VPOR Y1, Y2, Y10
	VPBLENDVB Y10, Y5, Y8, Y8
	VPBLENDVB Y3, Y9, Y8, Y8
	VMOVDQU Y4, Y12 // g: rising, hi, hi, falling, lo, lo
	VPBLENDVB Y6, Y9, Y12, Y12
	VPBLENDVB Y2, Y11, Y12, Y12
	VPOR Y3, Y7, Y10
	VPBLENDVB Y10, Y5, Y12, Y12
	VMOVDQU Y4, Y13 // b: lo, lo, rising, hi, hi, falling
	VPOR Y6, Y0, Y10
	VPBLENDVB Y10, Y5, Y13, Y13
	VPBLENDVB Y1, Y9, Y13, Y13
	VPBLENDVB Y7, Y11, Y13, Y13

	VPACKUSDW Y12, Y8, Y8
	VPACKUSDW Y13, Y13, Y13
	VPACKUSWB Y13, Y8, Y8
	VPSHUFB hueRGB<>(SB), Y8, Y8
	VEXTRACTI128 $1, Y8, X9
	VMOVQ X8, (SI)
	VPEXTRD $2, X8, AX
	MOVL AX, 8(SI)
	VMOVQ X9, 12(SI)
	VPEXTRD $2, X9, AX
	MOVL AX, 20(SI)
	ADDQ $24, SI
	SUBQ $8, CX
	JNZ hueloop
	VZEROUPPER
	RET

// hueConst: the sextants 0–5, then 2¹⁶ − 1.
DATA hueConst<>+0(SB)/4, $0
DATA hueConst<>+4(SB)/4, $1
DATA hueConst<>+8(SB)/4, $2
DATA hueConst<>+12(SB)/4, $3
DATA hueConst<>+16(SB)/4, $4
DATA hueConst<>+20(SB)/4, $5
DATA hueConst<>+24(SB)/4, $0xffff
DATA hueConst<>+28(SB)/4, $0
GLOBL hueConst<>(SB), RODATA|NOPTR, $32

// hueR, hueG, hueB take a lane's four pixels' r, g or b into 32-bit lanes.
DATA hueR<>+0(SB)/8, $0x8080800380808000
DATA hueR<>+8(SB)/8, $0x8080800980808006
DATA hueR<>+16(SB)/8, $0x8080800380808000
DATA hueR<>+24(SB)/8, $0x8080800980808006
GLOBL hueR<>(SB), RODATA|NOPTR, $32
DATA hueG<>+0(SB)/8, $0x8080800480808001
DATA hueG<>+8(SB)/8, $0x8080800a80808007
DATA hueG<>+16(SB)/8, $0x8080800480808001
DATA hueG<>+24(SB)/8, $0x8080800a80808007
GLOBL hueG<>(SB), RODATA|NOPTR, $32
DATA hueB<>+0(SB)/8, $0x8080800580808002
DATA hueB<>+8(SB)/8, $0x8080800b80808008
DATA hueB<>+16(SB)/8, $0x8080800580808002
DATA hueB<>+24(SB)/8, $0x8080800b80808008
GLOBL hueB<>(SB), RODATA|NOPTR, $32

// hueRGB interleaves a lane's R0–3 G0–3 B0–3 into R0 G0 B0 R1 … B3.
DATA hueRGB<>+0(SB)/8, $0x0602090501080400
DATA hueRGB<>+8(SB)/8, $0x808080800b07030a
DATA hueRGB<>+16(SB)/8, $0x0602090501080400
DATA hueRGB<>+24(SB)/8, $0x808080800b07030a
GLOBL hueRGB<>(SB), RODATA|NOPTR, $32

// RGB8 takes eight pixels at SI (reading 28 bytes) into r, g, b (Y1, Y2, Y3) on 32-bit lanes,
// pixels 0–3 in the low lane and 4–7 in the high one; LUMA8 puts their luma into Y4
// (Y13, Y14: the luma weights; Y12: the rounding), as luma computes it.
#define RGB8 \
	VMOVDQU (SI), X0 \
	VMOVDQU 12(SI), X1 \
	VINSERTI128 $1, X1, Y0, Y0 \
	VPSHUFB hueR<>(SB), Y0, Y1 \
	VPSHUFB hueG<>(SB), Y0, Y2 \
	VPSHUFB hueB<>(SB), Y0, Y3

#define LUMA8 \
	VPMULLD lumaWeights<>+0(SB), Y1, Y4 \
	VPMULLD lumaWeights<>+32(SB), Y2, Y5 \
	VPADDD Y5, Y4, Y4 \
	VPMULLD lumaWeights<>+64(SB), Y3, Y5 \
	VPADDD Y5, Y4, Y4 \
	VPADDD lumaWeights<>+96(SB), Y4, Y4 \
	VPSRLD $16, Y4, Y4

// STORE8 packs r, g, b in Y8, Y12, Y13 (0…255 after the packs' clamp) back into 24 bytes at SI.
#define STORE8 \
	VPACKUSDW Y12, Y8, Y8 \
	VPACKUSDW Y13, Y13, Y13 \
	VPACKUSWB Y13, Y8, Y8 \
	VPSHUFB hueRGB<>(SB), Y8, Y8 \
	VEXTRACTI128 $1, Y8, X9 \
	VMOVQ X8, (SI) \
	VPEXTRD $2, X8, AX \
	MOVL AX, 8(SI) \
	VMOVQ X9, 12(SI) \
	VPEXTRD $2, X9, AX \
	MOVL AX, 20(SI)

// func saturationAVX2(pix *uint8, n int, f int32)
// out = (F·v + (2¹⁶ − F)·L) >> 16 clamped, n pixels (a positive multiple of 8); the caller
// keeps F small enough for 32-bit lanes.
TEXT ·saturationAVX2(SB), NOSPLIT, $0-20
	MOVQ pix+0(FP), SI
	MOVQ n+8(FP), CX
	MOVL f+16(FP), AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15 // F
	NEGL AX
	ADDL $0x10000, AX
	VMOVD AX, X14
	VPBROADCASTD X14, Y14 // 2¹⁶ − F

satloop:
	RGB8
	LUMA8
	VPMULLD Y14, Y4, Y4
	VPMULLD Y15, Y1, Y8
	VPADDD Y4, Y8, Y8
	VPSRAD $16, Y8, Y8
	VPMULLD Y15, Y2, Y12
	VPADDD Y4, Y12, Y12
	VPSRAD $16, Y12, Y12
	VPMULLD Y15, Y3, Y13
	VPADDD Y4, Y13, Y13
	VPSRAD $16, Y13, Y13
	STORE8
	ADDQ $24, SI
	SUBQ $8, CX
	JNZ satloop
	VZEROUPPER
	RET

// func grayscaleAVX2(pix *uint8, n int)
TEXT ·grayscaleAVX2(SB), NOSPLIT, $0-16
	MOVQ pix+0(FP), SI
	MOVQ n+8(FP), CX

grayloop:
	RGB8
	LUMA8
	VMOVDQU Y4, Y8
	VMOVDQU Y4, Y12
	VMOVDQU Y4, Y13
	STORE8
	ADDQ $24, SI
	SUBQ $8, CX
	JNZ grayloop
	VZEROUPPER
	RET

// func lumaSumAVX2(pix *uint8, n int, lanes *[8]int32)
// Adds the luma of n pixels (a positive multiple of 8, at most 2²³ so that no lane overflows)
// into eight lanes.
TEXT ·lumaSumAVX2(SB), NOSPLIT, $0-24
	MOVQ pix+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ lanes+16(FP), DI
	VPXOR Y10, Y10, Y10

sumloop:
	RGB8
	LUMA8
	VPADDD Y4, Y10, Y10
	ADDQ $24, SI
	SUBQ $8, CX
	JNZ sumloop
	VMOVDQU Y10, (DI)
	VZEROUPPER
	RET

// lumaWeights: luma's 19595, 38470 and 7471, and the rounding 2¹⁵, each in eight lanes.
DATA lumaWeights<>+0(SB)/8, $0x00004c8b00004c8b
DATA lumaWeights<>+8(SB)/8, $0x00004c8b00004c8b
DATA lumaWeights<>+16(SB)/8, $0x00004c8b00004c8b
DATA lumaWeights<>+24(SB)/8, $0x00004c8b00004c8b
DATA lumaWeights<>+32(SB)/8, $0x0000964600009646
DATA lumaWeights<>+40(SB)/8, $0x0000964600009646
DATA lumaWeights<>+48(SB)/8, $0x0000964600009646
DATA lumaWeights<>+56(SB)/8, $0x0000964600009646
DATA lumaWeights<>+64(SB)/8, $0x00001d2f00001d2f
DATA lumaWeights<>+72(SB)/8, $0x00001d2f00001d2f
DATA lumaWeights<>+80(SB)/8, $0x00001d2f00001d2f
DATA lumaWeights<>+88(SB)/8, $0x00001d2f00001d2f
DATA lumaWeights<>+96(SB)/8, $0x0000800000008000
DATA lumaWeights<>+104(SB)/8, $0x0000800000008000
DATA lumaWeights<>+112(SB)/8, $0x0000800000008000
DATA lumaWeights<>+120(SB)/8, $0x0000800000008000
GLOBL lumaWeights<>(SB), RODATA|NOPTR, $128

// func brightnessAVX2(pix *uint8, n int, f int32)
// pix[i] = min(255, F·pix[i] >> 16) for n values (a positive multiple of 16), F ≤ 2¹⁵·2¹⁶/255.
TEXT ·brightnessAVX2(SB), NOSPLIT, $0-20
	MOVQ pix+0(FP), SI
	MOVQ n+8(FP), CX
	MOVL f+16(FP), AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15

brightloop:
	VPMOVZXBD (SI), Y0
	VPMOVZXBD 8(SI), Y1
	VPMULLD Y15, Y0, Y0
	VPMULLD Y15, Y1, Y1
	VPSRLD $16, Y0, Y0
	VPSRLD $16, Y1, Y1
	VPACKUSDW Y1, Y0, Y0
	VPERMQ $0xD8, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPACKUSWB X1, X0, X0
	VMOVDQU X0, (SI)
	ADDQ $16, SI
	SUBQ $16, CX
	JNZ brightloop
	VZEROUPPER
	RET

// func packLanesAVX2(dst *uint64, lo, hi *uint8, n int)
TEXT ·packLanesAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ lo+8(FP), SI
	MOVQ hi+16(FP), DX
	MOVQ n+24(FP), CX

ploop:
	VPMOVZXBQ (SI), Y0
	VPMOVZXBQ (DX), Y1
	VPSLLQ $32, Y1, Y1
	VPOR Y1, Y0, Y0
	VMOVDQU Y0, (DI)
	ADDQ $4, SI
	ADDQ $4, DX
	ADDQ $32, DI
	SUBQ $4, CX
	JNZ ploop
	VZEROUPPER
	RET

// func midLanesAVX2(dst, acc *uint64, n, shift int)
// Each uint64 is two 32-bit lanes that never carry into each other, so the shift and mask
// are the lanes' own.
TEXT ·midLanesAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ acc+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ shift+24(FP), AX
	VMOVQ AX, X15
	VPCMPEQD Y14, Y14, Y14
	VPSRLD $16, Y14, Y14 // 0xffff in every 32-bit lane

mloop:
	VMOVDQU (SI), Y0
	VPSRLD X15, Y0, Y0
	VPAND Y14, Y0, Y0
	VMOVDQU Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $4, CX
	JNZ mloop
	VZEROUPPER
	RET

// func bytesOfLanesAVX2(out0, out1 *uint8, acc *uint64, n, shift int)
// Eight uint64s per iteration: shifted per lane, lane 0s then lane 1s gathered in each
// register, packed to bytes (every value is below 256, so the packs do not saturate).
TEXT ·bytesOfLanesAVX2(SB), NOSPLIT, $0-40
	MOVQ out0+0(FP), DI
	MOVQ out1+8(FP), DX
	MOVQ acc+16(FP), SI
	MOVQ n+24(FP), CX
	MOVQ shift+32(FP), AX
	VMOVQ AX, X15
	VMOVDQU lanesApart<>(SB), Y13

oloop:
	VMOVDQU (SI), Y0
	VMOVDQU 32(SI), Y1
	VPSRLD X15, Y0, Y0
	VPSRLD X15, Y1, Y1
	VPERMD Y0, Y13, Y0      // lane 0 of acc[j…j+3], then their lane 1
	VPERMD Y1, Y13, Y1
	VPACKUSDW Y1, Y0, Y0    // lane 0s of the eight, then lane 1s, as words
	VPACKUSWB Y0, Y0, Y0
	VMOVQ X0, (DI)
	VEXTRACTI128 $1, Y0, X1
	VMOVQ X1, (DX)
	ADDQ $64, SI
	ADDQ $8, DI
	ADDQ $8, DX
	SUBQ $8, CX
	JNZ oloop
	VZEROUPPER
	RET

DATA lanesApart<>+0(SB)/8, $0x0000000200000000
DATA lanesApart<>+8(SB)/8, $0x0000000600000004
DATA lanesApart<>+16(SB)/8, $0x0000000300000001
DATA lanesApart<>+24(SB)/8, $0x0000000700000005
GLOBL lanesApart<>(SB), RODATA|NOPTR, $32
