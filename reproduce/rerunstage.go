package reproduce

import (
	"fmt"
	"slices"
	"strings"
)

// ParseRerun reads --rerun: a comma-separated list of stage kinds and groups (ParseStages)
// and of single runs' stages, named as the plan names them ("train dcl-b32": the run dcl-b32's
// training, and what depends on it). Whether the run exists is Run's to check.
func ParseRerun(s string) (kinds []StageKind, stages []string, err error) {
	var groups []string
	for _, entry := range strings.Split(s, ",") {
		entry = strings.Join(strings.Fields(entry), " ")
		kind, run, one := strings.Cut(entry, " ")
		if !one {
			groups = append(groups, entry)
			continue
		}
		if !slices.Contains(stageKinds, StageKind(kind)) || kind == string(StagePreprocess) || strings.Contains(run, " ") {
			return nil, nil, fmt.Errorf("unknown stage %q: a run's stage is one of %s and the run's name, e.g. %q",
				entry, strings.Join(runStageKinds(), ", "), "train dcl")
		}
		stages = append(stages, entry)
	}
	if kinds, err = ParseStages(strings.Join(groups, ",")); err != nil {
		return nil, nil, err
	}
	return kinds, stages, nil
}

// runStageKinds are the kinds of stage every run has one of.
func runStageKinds() []string {
	var out []string
	for _, k := range stageKinds {
		if k != StagePreprocess {
			out = append(out, string(k))
		}
	}
	return out
}

// checkRerunStages refuses a run's stage to rerun whose run the config does not have.
func checkRerunStages(cfg *Config, stages []string) error {
	for _, s := range stages {
		_, run, _ := strings.Cut(s, " ")
		if !slices.ContainsFunc(cfg.Runs, func(c RunConfig) bool { return c.Name == run }) {
			names := make([]string, len(cfg.Runs))
			for i, c := range cfg.Runs {
				names[i] = c.Name
			}
			return fmt.Errorf("rerun %q: the config has no run %s (its runs: %s)", s, run, strings.Join(names, ", "))
		}
	}
	return nil
}
