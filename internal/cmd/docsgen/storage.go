package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/dcl-beam/dcl-beam/experiments"
	"github.com/dcl-beam/dcl-beam/internal/progress"
	"github.com/dcl-beam/dcl-beam/internal/storage"
)

// storageSection is the table of what each built-in config writes for its datasets, with
// stored views and as configured, from experiments.StorageFile under the root.
func storageSection(ctx context.Context, g *generator, _ section) (string, []error, error) {
	text, err := storageTable(ctx, g.root)
	return text, nil, err
}

func storageTable(ctx context.Context, root string) (string, error) {
	path := filepath.Join(root, experiments.StorageFile)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return "No storage figures are kept yet: run `go test ./experiments -run TestStorageFigures -update-storage`, then `make docs`.", nil
	}
	var s experiments.Storage
	if err := storage.LoadJSON(ctx, path, &s); err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("| config | pretraining images | epochs | stored views, a pass per epoch | as configured | stored ÷ configured | evaluation datasets, with the linear probe's crops (either way) |\n")
	b.WriteString("|---|---|---:|---:|---|---:|---:|\n")
	for _, f := range s.Configs {
		now := "base shards " + progress.Bytes(f.Configured)
		if f.Views != "online" {
			now = fmt.Sprintf("%d stored passes %s", f.Passes, progress.Bytes(f.Configured))
		}
		ratio := float64(f.StoredViews) / float64(f.Configured)
		r := fmt.Sprintf("%.0f×", ratio)
		if ratio < 10 {
			r = fmt.Sprintf("%.1f×", ratio)
		}
		fmt.Fprintf(&b, "| `%s` | %s %s, %s | %d | %s | %s | %s | %s |\n", f.Config, f.Dataset, f.Split, thousands(f.Records), f.Epochs,
			progress.Bytes(f.StoredViews), now, r, progress.Bytes(f.Evaluation))
	}
	fmt.Fprintf(&b, "\nHow: %s. Made by `%s`, then `make docs`; the test checks that the kept figures stay what the configs and the estimator give.\n",
		s.Method, s.Command)
	return b.String(), nil
}

// thousands writes n with thousands separators.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
