// Package internal holds the code that is not part of the toolkit's layers, sorted by role:
//
//   - libraries any layer may import (every package directly under internal/ but cmd and
//     testing): each imports only the standard library, outside modules and other libraries
//     here, never a domain package of the toolkit (TestLibrariesImportNoDomainPackage);
//   - internal/cmd/…: helper programs the Makefile runs;
//   - internal/testing/…: helpers for tests (fixtures, an in-process GCS emulator, tiny
//     encoders), which may import anything.
//
// The engine of a subcommand lives beside what it serves, not here (dcl gpu-check and dcl
// agree in verify/).
package internal
