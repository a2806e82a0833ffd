// Package simd says whether the project's hand-written AVX2 loops run: the GEMM's element-wise
// loops (gpu/kernels), the augmentations (transforms/augment), JPEG's colour conversion
// (transforms) and the JPEG decoder's block reconstruction (internal/jpeg). Each package
// keeps a pure-Go loop that computes the same values; DCL_KERNEL=go
// selects those everywhere (for comparisons and for machines where the vector units
// misbehave), as it caps gpu/kernels' micro-kernel.
package simd

import (
	"os"

	"golang.org/x/sys/cpu"
)

// AVX2 is whether the AVX2 loops run: the CPU has AVX2 and DCL_KERNEL is not "go".
var AVX2 = cpu.X86.HasAVX2 && os.Getenv("DCL_KERNEL") != "go"
