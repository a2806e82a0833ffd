package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/internal/testing/testfiles"
)

// killHuntDocs is where the hunts are kept, relative to the root.
const killHuntDocs = "docs/reliability"

// killHuntSection is the kill hunt's table: the sum of the hunts kept under the root.
func killHuntSection(ctx context.Context, g *generator, _ section) (string, []error, error) {
	text, err := killHuntTable(ctx, g.root)
	return text, nil, err
}

func killHuntTable(ctx context.Context, root string) (string, error) {
	files, err := filepath.Glob(filepath.Join(root, killHuntDocs, "kill-seed-*.json"))
	if err != nil {
		return "", err
	}
	if len(files) == 0 {
		return "No kill hunt is kept yet: run `DCL_KILL_RESULTS=" + killHuntDocs + " DCL_KILL_SEED=14 DCL_KILL_ROUNDS=20 " +
			"go test -run TestKilledRunsRerunToTheSameOutput ./cmd/dcl`, then `make docs`.", nil
	}
	slices.Sort(files)
	var sum testfiles.KillHunt
	var seeds, machines, commands []string
	for _, f := range files {
		var h testfiles.KillHunt
		if err := storage.LoadJSON(ctx, f, &h); err != nil {
			return "", err
		}
		if sum.Jobs != nil && !slices.Equal(sum.Jobs, h.Jobs) {
			return "", fmt.Errorf("%s killed %s, %s killed %s: keep hunts of one version of the test",
				f, strings.Join(h.Jobs, ", "), files[0], strings.Join(sum.Jobs, ", "))
		}
		sum.Jobs = h.Jobs
		sum.Runs += h.Runs
		sum.Killed += h.Killed
		sum.InReportPhase += h.InReportPhase
		sum.AfterFinalCheckpoint += h.AfterFinalCheckpoint
		sum.Differences += h.Differences
		sum.RecordsLost += h.RecordsLost
		seeds = append(seeds, fmt.Sprintf("%d (%d rounds)", h.Seed, h.Rounds))
		machines = append(machines, h.Machine)
		commands = append(commands, "`DCL_KILL_RESULTS="+killHuntDocs+" "+h.Command+"`")
	}
	var b strings.Builder
	b.WriteString("| kill hunt (SIGKILL at seeded random points, then the same command again) | value |\n|---|---|\n")
	fmt.Fprintf(&b, "| commands | %s |\n", strings.Join(sum.Jobs, "; "))
	fmt.Fprintf(&b, "| runs killed | %d of %d (%d finished before their kill); %d reproductions in their report phase, %d trainings after their final checkpoint |\n",
		sum.Killed, sum.Runs, sum.Runs-sum.Killed, sum.InReportPhase, sum.AfterFinalCheckpoint)
	fmt.Fprintf(&b, "| re-runs whose output differed from an uninterrupted run's | %d |\n", sum.Differences)
	fmt.Fprintf(&b, "| records lost | %d |\n", sum.RecordsLost)
	fmt.Fprintf(&b, "| seeds | %s |\n", strings.Join(seeds, ", "))
	fmt.Fprintf(&b, "| machine | %s |\n", strings.Join(slices.Compact(machines), "; "))
	fmt.Fprintf(&b, "| commands that made these figures | %s, then `make docs` |\n", strings.Join(commands, ", "))
	return b.String(), nil
}
