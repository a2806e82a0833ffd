package reproduce

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/dcl-beam/dcl-beam/gpu/cuda"
	"github.com/dcl-beam/dcl-beam/gpu/kernels"
	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/pipelines"
)

// StageTimes is what the stages of one reproduction took (Options.StageTimes): each stage
// that ran, its seconds and images a second, with the machine and the config, so that a
// table of them (StageTimesMarkdown) can be regenerated from the file alone.
type StageTimes struct {
	Experiment        string    `json:"experiment"`
	ConfigFingerprint string    `json:"config_fingerprint"`
	CodeVersion       string    `json:"code_version"`
	Time              time.Time `json:"time"`
	// GPU is the first GPU's name as nvidia-smi gives it ("" on a machine without one); CPU
	// the processor, its cores and the CPU kernels' instruction set.
	GPU string `json:"gpu"`
	CPU string `json:"cpu"`
	// Backend is the runs' compute backend as asked (--backend, else the first run's);
	// Runner the Beam runner of the pipelines.
	Backend string  `json:"backend"`
	Runner  string  `json:"runner"`
	Wall    float64 `json:"wall_seconds"`
	Config  *Config `json:"config"`
	// Stages ran in this order; skipped stages are not listed.
	Stages []StageTime `json:"stages"`
}

// stageTimes collects the reproduction's stage times.
func (r *runner) stageTimes(ctx context.Context, start time.Time) StageTimes {
	st := StageTimes{
		Experiment: r.cfg.Name, ConfigFingerprint: r.cfg.Fingerprint(), CodeVersion: r.opts.CodeVersion,
		Time: start.UTC(), CPU: cpuName(), Runner: pipelines.RunnerName(),
		Wall: r.opts.Now().Sub(start).Seconds(), Config: r.cfg, Stages: r.times,
	}
	if len(r.cfg.Runs) > 0 {
		st.Backend = r.backendOf(r.cfg.Runs[0])
	}
	if gpus := cuda.Diagnose(ctx, cuda.DiagnoseOptions{NoLoad: true}).GPUs; len(gpus) > 0 {
		st.GPU = gpus[0].Name
	}
	return st
}

// cpuName is the processor's model (Linux's /proc/cpuinfo), its logical cores and the
// instruction set of the CPU kernels, e.g. "AMD EPYC, 2 cores, avx2".
func cpuName() string {
	model := runtime.GOARCH
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	return fmt.Sprintf("%s, %d cores, %s", model, runtime.NumCPU(), kernels.KernelName())
}

// writeStageTimes saves st as JSON at path.
func writeStageTimes(ctx context.Context, path string, st StageTimes) error {
	if err := storage.SaveJSON(ctx, path, st); err != nil {
		return fmt.Errorf("writing the stage times: %w", err)
	}
	return nil
}

// evaluationKinds are the stage kinds that evaluate a trained encoder.
var evaluationKinds = []StageKind{StageEmbed, StageKNN, StageLinear, StageNPC}

// stageKindOf is the kind of a stage, from its name ("embed dcl-b32" → embed; the
// random-init baseline's initialisation counts as training).
func stageKindOf(name string) StageKind {
	first, _, _ := strings.Cut(name, " ")
	if first == "initialise" {
		return StageTrain
	}
	return StageKind(first)
}

// StageTimesMarkdown renders st as the Markdown that BENCHMARKS.md shows: what ran where,
// one row per stage, and the time of each kind of stage with its share of the wall time.
func StageTimesMarkdown(st StageTimes) string {
	var b strings.Builder
	gpu := st.GPU
	if gpu == "" {
		gpu = "none"
	}
	fmt.Fprintf(&b, "`%s` (config %s), dcl %s, %s: GPU %s; CPU %s; backend %s; Beam runner %s; wall %.0f s.\n\n",
		st.Experiment, st.ConfigFingerprint, st.CodeVersion, st.Time.Format("2006-01-02"), gpu, st.CPU,
		cmp.Or(st.Backend, "auto"), cmp.Or(st.Runner, pipelines.DefaultRunner), st.Wall)
	if c := st.Config; c != nil && len(c.Runs) > 0 {
		var runs []string
		for _, r := range c.Runs {
			runs = append(runs, fmt.Sprintf("%s (%s, batch %d, %d epochs)", r.Name, r.Model(), r.BatchSize(), r.Epochs()))
		}
		fmt.Fprintf(&b, "Runs: %s.\n\n", strings.Join(runs, "; "))
	}
	b.WriteString("| stage | seconds | images/s |\n|---|---:|---:|\n")
	byKind := map[StageKind]float64{}
	for _, s := range st.Stages {
		rate := "—"
		if s.ImagesPerS != nil {
			rate = fmt.Sprintf("%.0f", *s.ImagesPerS)
		}
		fmt.Fprintf(&b, "| %s | %.1f | %s |\n", s.Stage, s.Seconds, rate)
		byKind[stageKindOf(s.Stage)] += s.Seconds
	}
	b.WriteString("\n| stages | seconds | share of the wall time |\n|---|---:|---:|\n")
	share := func(sec float64) string {
		if st.Wall <= 0 {
			return "—"
		}
		return fmt.Sprintf("%.0f%%", 100*sec/st.Wall)
	}
	var eval float64
	for _, k := range stageKinds {
		if sec, ok := byKind[k]; ok {
			fmt.Fprintf(&b, "| %s | %.1f | %s |\n", k, sec, share(sec))
		}
	}
	for _, k := range evaluationKinds {
		eval += byKind[k]
	}
	fmt.Fprintf(&b, "| evaluation (embed, knn, linear, npc) | %.1f | %s |\n", eval, share(eval))
	return b.String()
}
