//go:build amd64 && !purego

#include "textflag.h"

// func ycbcrRowAVX2(out, y, cb, cr *uint8, n, halfChroma int)
// Eight pixels per iteration: R = Y·0x10101 + 91881·Cr, G = … − 22554·Cb − 46802·Cr,
// B = … + 116130·Cb (Cb, Cr less 128), >> 16, clamped to 0…255 by the packs, then the three
// planes interleaved, four pixels in each 128-bit lane.
TEXT ·ycbcrRowAVX2(SB), NOSPLIT, $0-48
	MOVQ out+0(FP), DI
	MOVQ y+8(FP), SI
	MOVQ cb+16(FP), R8
	MOVQ cr+24(FP), R9
	MOVQ n+32(FP), CX
	MOVQ halfChroma+40(FP), DX
	MOVL $0x10101, AX
	VMOVD AX, X14
	VPBROADCASTD X14, Y14
	MOVL $91881, AX
	VMOVD AX, X13
	VPBROADCASTD X13, Y13
	MOVL $-22554, AX
	VMOVD AX, X12
	VPBROADCASTD X12, Y12
	MOVL $-46802, AX
	VMOVD AX, X11
	VPBROADCASTD X11, Y11
	MOVL $116130, AX
	VMOVD AX, X10
	VPBROADCASTD X10, Y10
	MOVL $128, AX
	VMOVD AX, X9
	VPBROADCASTD X9, Y9
	VMOVDQU chromaPairs<>(SB), Y8
	VMOVDQU rgbOfFour<>(SB), Y7

yloop:
	VPMOVZXBD (SI), Y0
	VPMULLD Y14, Y0, Y0
	TESTQ DX, DX
	JZ perpixel
	VMOVD (R8), X1
	VPMOVZXBD X1, Y1
	VPERMD Y1, Y8, Y1
	VMOVD (R9), X2
	VPMOVZXBD X2, Y2
	VPERMD Y2, Y8, Y2
	ADDQ $4, R8
	ADDQ $4, R9
	JMP convert

perpixel:
	VPMOVZXBD (R8), Y1
	VPMOVZXBD (R9), Y2
	ADDQ $8, R8
	ADDQ $8, R9

convert:
	VPSUBD Y9, Y1, Y1
	VPSUBD Y9, Y2, Y2
	VPMULLD Y13, Y2, Y3
	VPADDD Y0, Y3, Y3
	VPMULLD Y12, Y1, Y4
	VPMULLD Y11, Y2, Y5
	VPADDD Y4, Y5, Y5
	VPADDD Y0, Y5, Y4
	VPMULLD Y10, Y1, Y5
	VPADDD Y0, Y5, Y5
	VPSRAD $16, Y3, Y3
	VPSRAD $16, Y4, Y4
	VPSRAD $16, Y5, Y5
	VPACKUSDW Y4, Y3, Y3
	VPACKUSDW Y5, Y5, Y5
	VPACKUSWB Y5, Y3, Y3
	VPSHUFB Y7, Y3, Y3
	VMOVDQU X3, (DI)
	VEXTRACTI128 $1, Y3, X4
	VMOVDQU X4, 12(DI)
	ADDQ $8, SI
	ADDQ $24, DI
	SUBQ $8, CX
	JNZ yloop
	VZEROUPPER
	RET

// chromaPairs repeats each of four chroma samples for two pixels.
DATA chromaPairs<>+0(SB)/8, $0x0000000000000000
DATA chromaPairs<>+8(SB)/8, $0x0000000100000001
DATA chromaPairs<>+16(SB)/8, $0x0000000200000002
DATA chromaPairs<>+24(SB)/8, $0x0000000300000003
GLOBL chromaPairs<>(SB), RODATA|NOPTR, $32

// rgbOfFour interleaves a lane's R0–3 G0–3 B0–3 into R0 G0 B0 R1 … B3.
DATA rgbOfFour<>+0(SB)/8, $0x0602090501080400
DATA rgbOfFour<>+8(SB)/8, $0x808080800b07030a
DATA rgbOfFour<>+16(SB)/8, $0x0602090501080400
DATA rgbOfFour<>+24(SB)/8, $0x808080800b07030a
GLOBL rgbOfFour<>(SB), RODATA|NOPTR, $32
