package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"

	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/reproduce"
	"github.com/dcl-beam/dcl-beam/verify"
)

// The GPU runs' results, as committed from what scripts/gpu-check.sh sent back: the GPU
// check's (OUT check) and the stage times of a short reproduction on the GPU (OUT eval).
const (
	gpuCheckResult = "docs/gpu/gpu-check.json"
	stageTimesFile = "docs/gpu/reproduce-stages.json"
)

// stagesPending is the stage table's text while no stage times are committed.
const stagesPending = "No GPU run yet: `scripts/gpu-check.sh OUT eval` on a GPU machine writes `OUT/reproduce-stages.json`; " +
	"commit it as `" + stageTimesFile + "` and run `make docs`."

// gpuCheckSummary is the GPU check's machine, agreement verdicts and step table.
func gpuCheckSummary(ctx context.Context, g *generator, _ section) (string, []error, error) {
	return gpuCheck(ctx, g, verify.SummarySection)
}

// gpuCheckTables is every table of the GPU check.
func gpuCheckTables(ctx context.Context, g *generator, _ section) (string, []error, error) {
	return gpuCheck(ctx, g, verify.TablesSection)
}

func gpuCheck(ctx context.Context, g *generator, name string) (string, []error, error) {
	var r *verify.CheckResult
	path := filepath.Join(g.root, gpuCheckResult)
	if _, err := os.Stat(path); err == nil {
		if r, err = verify.ReadCheckResult(ctx, path); err != nil {
			return "", nil, err
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", nil, err
	}
	text, err := verify.Section(name, r)
	return text, nil, err
}

// stageTimesSection is the seconds and images/s of every stage of the GPU's short
// reproduction.
func stageTimesSection(ctx context.Context, g *generator, _ section) (string, []error, error) {
	path := filepath.Join(g.root, stageTimesFile)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return stagesPending, nil, nil
	}
	var st reproduce.StageTimes
	if err := storage.LoadJSON(ctx, path, &st); err != nil {
		return "", nil, err
	}
	return reproduce.StageTimesMarkdown(st), nil, nil
}
