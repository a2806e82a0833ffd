package main

import (
	"context"

	"github.com/dcl-beam/dcl-beam/reproduce"
)

// configKeysSection is the reference of every config key, from the declarations
// (reproduce.ConfigReference).
func configKeysSection(context.Context, *generator, section) (string, []error, error) {
	return reproduce.ConfigReference(), nil, nil
}
