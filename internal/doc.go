// Package internal holds the code that is not part of the toolkit's layers, sorted by role:
//
//   - libraries any layer may import (storage, registry, progress, safetensors, tensorboard,
//     guard, simd, jpeg, usage, cputime, sysmem): each imports only the standard library,
//     outside modules and other libraries here, never a domain package of the toolkit
//     (TestLibrariesImportNoDomainPackage);
//   - internal/cmd/…: helper programs the Makefile runs (readmegen, runwatch);
//   - internal/testing/…: helpers for tests (fixtures, an in-process GCS emulator, tiny
//     encoders), which may import anything.
//
// The engine of a subcommand lives beside what it serves, not here (dcl gpu-check and dcl
// agree in verify/).
package internal
