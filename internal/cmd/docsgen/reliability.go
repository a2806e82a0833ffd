package main

import (
	"context"
	"os"
	"path/filepath"

	"github.com/dcl-beam/dcl-beam/internal/testing/reliability"
)

// reliabilitySection is docs/reliability.md's list of promises, from their declarations
// beside the tests that check them (reliability.Claims); a claim naming no test, or a test
// that does not exist, fails it. A root without go.mod (the tests' scratch roots, which hold
// docs alone) has no tests to check the claims against.
func reliabilitySection(_ context.Context, g *generator, _ section) (string, []error, error) {
	if _, err := os.Stat(filepath.Join(g.root, "go.mod")); err == nil {
		if err := reliability.Check(g.root, reliability.Claims); err != nil {
			return "", nil, err
		}
	}
	return reliability.Markdown(reliability.Claims), nil, nil
}
