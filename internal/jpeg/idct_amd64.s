//go:build amd64 && !purego

#include "textflag.h"

// a, b = a+b, a-b (t is clobbered).
#define BFLY(a, b, t) \
	VPADDD b, a, t; \
	VPSUBD b, a, b; \
	VMOVDQA t, a

// a, b = dctBox(a, b, kcos, ksin), its three multipliers at k, k+32 and k+64 bytes of CX
// (t and u are clobbered).
#define BOX(a, b, k, t, u) \
	VPADDD b, a, t; \
	VPMULLD k(CX), t, t; \
	VPMULLD k+32(CX), b, u; \
	VPMULLD k+64(CX), a, b; \
	VPADDD u, t, a; \
	VPSUBD b, t, b

// The 8×8 int32 matrix whose rows are a0…a7 transposed into t0…t7 (a0…a7 are clobbered).
#define TRANSPOSE(a0, a1, a2, a3, a4, a5, a6, a7, t0, t1, t2, t3, t4, t5, t6, t7) \
	VPUNPCKLDQ a1, a0, t0; \
	VPUNPCKHDQ a1, a0, t1; \
	VPUNPCKLDQ a3, a2, t2; \
	VPUNPCKHDQ a3, a2, t3; \
	VPUNPCKLDQ a5, a4, t4; \
	VPUNPCKHDQ a5, a4, t5; \
	VPUNPCKLDQ a7, a6, t6; \
	VPUNPCKHDQ a7, a6, t7; \
	VPUNPCKLQDQ t2, t0, a0; \
	VPUNPCKHQDQ t2, t0, a1; \
	VPUNPCKLQDQ t3, t1, a2; \
	VPUNPCKHQDQ t3, t1, a3; \
	VPUNPCKLQDQ t6, t4, a4; \
	VPUNPCKHQDQ t6, t4, a5; \
	VPUNPCKLQDQ t7, t5, a6; \
	VPUNPCKHQDQ t7, t5, a7; \
	VPERM2I128 $0x20, a4, a0, t0; \
	VPERM2I128 $0x31, a4, a0, t4; \
	VPERM2I128 $0x20, a5, a1, t1; \
	VPERM2I128 $0x31, a5, a1, t5; \
	VPERM2I128 $0x20, a6, a2, t2; \
	VPERM2I128 $0x31, a6, a2, t6; \
	VPERM2I128 $0x20, a7, a3, t3; \
	VPERM2I128 $0x31, a7, a3, t7

// Two rows of samples (int32 vectors r0, r1 and r2, r3 of the next two) packed with signed
// saturation to bytes, put back in row order, level shifted and stored at DI, DI+SI, ...;
// DI moves on four rows.
#define STORE4(r0, r1, r2, r3) \
	VPACKSSDW r1, r0, Y0; \
	VPACKSSDW r3, r2, Y1; \
	VPACKSSWB Y1, Y0, Y0; \
	VPERMD Y0, Y2, Y0; \
	VPXOR Y3, Y0, Y0; \
	VMOVQ X0, (DI); \
	VPEXTRQ $1, X0, (DI)(SI*1); \
	LEAQ (DI)(SI*2), DI; \
	VEXTRACTI128 $1, Y0, X1; \
	VMOVQ X1, (DI); \
	VPEXTRQ $1, X1, (DI)(SI*1); \
	LEAQ (DI)(SI*2), DI

// func reconstructAVX2(b, q *block, k *idctVectors, dst *uint8, stride int)
// The rows' pass runs on the transposed block (lane i is row i, register j column j), the
// columns' pass on the block (lane i is column i); the comments name idctRows' and idctCols'
// variables.
TEXT ·reconstructAVX2(SB), NOSPLIT, $0-40
	MOVQ b+0(FP), AX
	MOVQ q+8(FP), BX
	MOVQ k+16(FP), CX
	MOVQ dst+24(FP), DI
	MOVQ stride+32(FP), SI

	VMOVDQU 0(AX), Y8
	VPMULLD 0(BX), Y8, Y8
	VMOVDQU 32(AX), Y9
	VPMULLD 32(BX), Y9, Y9
	VMOVDQU 64(AX), Y10
	VPMULLD 64(BX), Y10, Y10
	VMOVDQU 96(AX), Y11
	VPMULLD 96(BX), Y11, Y11
	VMOVDQU 128(AX), Y12
	VPMULLD 128(BX), Y12, Y12
	VMOVDQU 160(AX), Y13
	VPMULLD 160(BX), Y13, Y13
	VMOVDQU 192(AX), Y14
	VPMULLD 192(BX), Y14, Y14
	VMOVDQU 224(AX), Y15
	VPMULLD 224(BX), Y15, Y15
	TRANSPOSE(Y8, Y9, Y10, Y11, Y12, Y13, Y14, Y15, Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7)

	// Rows: x0 Y0, x7 Y1, x2 Y2, x5 Y3, x1 Y4, x6 Y5, x3 Y6, x4 Y7.
	VPSLLD $17, Y0, Y0
	VPSLLD $17, Y4, Y4
	BFLY(Y0, Y4, Y8)         // x0, x1
	BOX(Y2, Y6, 0, Y8, Y9)   // x2, x3
	BFLY(Y4, Y2, Y8)         // x1, x2
	BFLY(Y0, Y6, Y8)         // x0, x3
	VPSLLD $7, Y7, Y7
	VPSLLD $7, Y1, Y1
	BFLY(Y1, Y7, Y8)         // x7, x4
	VPMULLD 96(CX), Y5, Y5   // x6
	VPMULLD 96(CX), Y3, Y3   // x5
	BFLY(Y1, Y3, Y8)         // x7, x5
	BFLY(Y7, Y5, Y8)         // x4, x6
	VPSRAD $2, Y7, Y7
	VPSRAD $2, Y1, Y1
	BOX(Y7, Y1, 128, Y8, Y9) // x4, x7
	VPSRAD $2, Y3, Y3
	VPSRAD $2, Y5, Y5
	BOX(Y3, Y5, 224, Y8, Y9) // x5, x6
	BFLY(Y0, Y1, Y8)         // x0, x7
	BFLY(Y4, Y5, Y8)         // x1, x6
	BFLY(Y2, Y3, Y8)         // x2, x5
	BFLY(Y6, Y7, Y8)         // x3, x4

	// Columns 0…7 of the rows' result are x0…x7: Y0, Y4, Y2, Y6, Y7, Y3, Y5, Y1.
	TRANSPOSE(Y0, Y4, Y2, Y6, Y7, Y3, Y5, Y1, Y8, Y9, Y10, Y11, Y12, Y13, Y14, Y15)

	// Columns: x0 Y8, x7 Y9, x2 Y10, x5 Y11, x1 Y12, x6 Y13, x3 Y14, x4 Y15.
	VPADDD 448(CX), Y8, Y8
	BFLY(Y8, Y12, Y0)          // x0, x1
	VPSRAD $2, Y8, Y8
	VPSRAD $2, Y12, Y12
	VPSRAD $13, Y10, Y10
	VPSRAD $13, Y14, Y14
	BOX(Y10, Y14, 320, Y0, Y1) // x2, x3
	BFLY(Y12, Y10, Y0)         // x1, x2
	BFLY(Y8, Y14, Y0)          // x0, x3
	BFLY(Y9, Y15, Y0)          // x7, x4
	VPSRAD $13, Y11, Y11
	VPMULLD 416(CX), Y11, Y11  // x5
	VPSRAD $13, Y13, Y13
	VPMULLD 416(CX), Y13, Y13  // x6
	BFLY(Y9, Y11, Y0)          // x7, x5
	BFLY(Y15, Y13, Y0)         // x4, x6
	VPSRAD $14, Y15, Y15
	VPSRAD $14, Y9, Y9
	BOX(Y15, Y9, 128, Y0, Y1)  // x4, x7
	VPSRAD $14, Y11, Y11
	VPSRAD $14, Y13, Y13
	BOX(Y11, Y13, 224, Y0, Y1) // x5, x6
	BFLY(Y8, Y9, Y0)           // x0, x7
	BFLY(Y12, Y13, Y0)         // x1, x6
	BFLY(Y10, Y11, Y0)         // x2, x5
	BFLY(Y14, Y15, Y0)         // x3, x4
	VPSRAD $18, Y8, Y8
	VPSRAD $18, Y9, Y9
	VPSRAD $18, Y10, Y10
	VPSRAD $18, Y11, Y11
	VPSRAD $18, Y12, Y12
	VPSRAD $18, Y13, Y13
	VPSRAD $18, Y14, Y14
	VPSRAD $18, Y15, Y15

	// Rows 0…7 are x0…x7: Y8, Y12, Y10, Y14, Y15, Y11, Y13, Y9.
	VMOVDQU 480(CX), Y2
	VMOVDQU 512(CX), Y3
	STORE4(Y8, Y12, Y10, Y14)
	STORE4(Y15, Y11, Y13, Y9)
	VZEROUPPER
	RET
