package reproduce

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dcl-beam/dcl-beam/gpu"
	"github.com/dcl-beam/dcl-beam/internal/progress"
	"github.com/dcl-beam/dcl-beam/internal/sysmem"
	"github.com/dcl-beam/dcl-beam/trainstep"
	"github.com/dcl-beam/dcl-beam/transforms/datasets"
)

// readPack reads train.pack (trainstep.PackSetting).
func (t *TrainConfig) readPack() error {
	if t.PackKey == nil {
		return nil
	}
	if !t.PackKey.null {
		v, err := trainstep.PackSetting().Value.Parse(t.PackKey.value)
		if err != nil {
			return fmt.Errorf("line %d: train.pack: %w", t.PackKey.line, err)
		}
		t.Pack = v.(trainstep.Pack)
	}
	t.PackKey = nil
	return nil
}

// PackGroup is runs of a config that train together, one compiled step for all (a pack), or
// one run that trains alone.
type PackGroup struct {
	// Runs are the runs' names, in the config's order.
	Runs []string `json:"runs"`
	// Shares is what the runs share, which lets them share a step: model, batch size, method,
	// precision, backend, epochs, checkpoint interval.
	Shares string `json:"shares"`
	// Why says why a run trains alone, or why a pack holds no more of the runs that share its
	// step ("" when nothing kept them apart).
	Why string `json:"why,omitempty"`
	// RunBytes is the estimated device memory of one run's step (0: not estimated).
	RunBytes int64 `json:"run_bytes,omitempty"`
}

// pack is the pack setting in force: the option's, else the config's.
func (r *runner) pack() trainstep.Pack {
	if r.opts.Pack != nil {
		return *r.opts.Pack
	}
	return r.cfg.Train.Pack
}

// packGroups decides once which runs train together: runs that share a step (packKey) in
// the config's order, as many a pack as the pack setting allows and the device's memory holds
// (deviceMemory, trainstep.TrainMemory).
func (r *runner) packGroups() ([]PackGroup, error) {
	if r.groups != nil {
		return r.groups, nil
	}
	setting := r.pack()
	type shared struct {
		key  string
		runs []string
		why  string // why they cannot pack at all
		cfg  RunConfig
	}
	var keys []*shared
	for _, run := range r.cfg.Runs {
		key, why, err := r.packKey(run)
		if err != nil {
			return nil, err
		}
		if setting == trainstep.PackOff {
			why = "pack: off"
		}
		i := slices.IndexFunc(keys, func(s *shared) bool { return s.key == key && s.why == "" && why == "" })
		if i < 0 {
			keys = append(keys, &shared{key: key, why: why, cfg: run})
			i = len(keys) - 1
		}
		keys[i].runs = append(keys[i].runs, run.Name)
	}
	var groups []PackGroup
	for _, s := range keys {
		if s.why != "" || len(s.runs) == 1 {
			why := cmp.Or(s.why, "no other run shares its model, batch size, method, precision, backend, epochs and checkpoint interval")
			groups = append(groups, PackGroup{Runs: s.runs, Shares: s.key, Why: why})
			continue
		}
		most := trainstep.PackAutoMax
		if setting != trainstep.PackAuto {
			most = int(setting)
		}
		why := ""
		if len(s.runs) > most {
			why = fmt.Sprintf("pack: %s holds at most %d runs", setting, most)
		}
		need, err := r.runMemory(s.cfg)
		if err != nil {
			return nil, err
		}
		memory := r.deviceMemory
		if memory == nil {
			memory = deviceMemory
		}
		if have, what := memory(r.backendOf(s.cfg)); have > 0 && need > 0 && int64(most)*need > have {
			if fit := int(have / need); fit < min(most, len(s.runs)) {
				most = max(fit, 1)
				why = fmt.Sprintf("one run's step takes about %s and %s holds %d", progress.Bytes(need), what, most)
			}
		}
		for start := 0; start < len(s.runs); start += most {
			g := PackGroup{Runs: s.runs[start:min(start+most, len(s.runs))], Shares: s.key, Why: why, RunBytes: need}
			groups = append(groups, g)
		}
	}
	r.groups = groups
	return groups, nil
}

// packKey is what run must share with others to train in a pack with them, and why it
// cannot where it cannot.
func (r *runner) packKey(run RunConfig) (key, why string, err error) {
	t, err := run.Training()
	if err != nil {
		return "", "", err
	}
	m := t.Step.Model
	model := m.Name
	if m.BaseWidth != 0 {
		model += " width " + strconv.Itoa(m.BaseWidth)
	}
	if m.ProjectionDim != 0 {
		model += " projection " + strconv.Itoa(m.ProjectionDim)
	}
	precision := cmp.Or(string(t.Step.Precision), string(trainstep.Float32))
	key = fmt.Sprintf("%s, batch %d, %s, %s, %s, %d epochs, checkpoint every %d steps", model, t.Run.BatchSize,
		cmp.Or(t.Step.Method, trainstep.SimCLRMethod), precision, r.backendOf(run), t.Run.Epochs, t.Run.CheckpointEvery)
	if err := trainstep.CanPack(t.Step); err != nil {
		why = err.Error()
	}
	if d := t.Run.Devices; d != 0 && d != 1 {
		why = fmt.Sprintf("it trains data parallel (devices: %s), and a pack trains on one device", trainstep.FormatDevices(d))
	}
	return key, why, nil
}

// runMemory estimates the device memory of one step of run (trainstep.TrainMemory) at the
// size the config's views have.
func (r *runner) runMemory(run RunConfig) (int64, error) {
	t, err := run.Training()
	if err != nil {
		return 0, err
	}
	size := r.cfg.Dataset.ImageSize
	d, err := datasets.Lookup(r.cfg.Dataset.Name)
	if err != nil {
		return 0, err
	}
	if size == 0 {
		size = d.ViewSize
	}
	bytes, err := trainstep.TrainMemory(t.Step, t.Run.BatchSize, size, size, 3)
	if err != nil {
		return 0, fmt.Errorf("run %s: estimating its memory: %w", run.Name, err)
	}
	return bytes, nil
}

// deviceMemory is how much memory runs on backend may take, and what that is, for a
// message (0 where it is not known): on a GPU three quarters of the first one's (XLA's
// allocator, its workspace and other processes take the rest), on the CPU half the machine's
// (evaluation's Beam workers and other programs share it).
func deviceMemory(backend string) (int64, string) {
	if backend != string(gpu.CPU) && backend != string(gpu.XLACPU) {
		if mib := firstGPUMemoryMiB(); mib > 0 {
			return mib << 20 * 3 / 4, fmt.Sprintf("three quarters of the GPU's %s", progress.Bytes(mib<<20))
		}
		if backend == string(gpu.CUDA) {
			return 0, ""
		}
	}
	if total, ok := sysmem.Total(); ok {
		return total / 2, fmt.Sprintf("half of this machine's %s", progress.Bytes(total))
	}
	return 0, ""
}

// firstGPUMemoryMiB is the memory of the first GPU nvidia-smi lists (0 without one).
func firstGPUMemoryMiB() int64 {
	smi, err := exec.LookPath("nvidia-smi")
	if err != nil {
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, smi, "--query-gpu=memory.total", "--format=csv,noheader,nounits").Output()
	if err != nil {
		return 0
	}
	first, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	mib, _ := strconv.ParseInt(strings.TrimSpace(first), 10, 64)
	return mib
}

// groupOf is the pack group of run name.
func (r *runner) groupOf(name string) (PackGroup, error) {
	groups, err := r.packGroups()
	if err != nil {
		return PackGroup{}, err
	}
	for _, g := range groups {
		for _, n := range g.Runs {
			if n == name {
				return g, nil
			}
		}
	}
	return PackGroup{}, fmt.Errorf("run %s is in no pack", name)
}

// trained is run's train stage, done: by its pack's training, which the first of its runs
// to be evaluated starts, or alone.
func (r *runner) trained(ctx context.Context, run RunConfig, data dataGen) (*runTraining, error) {
	if t, ok := r.trainings[run.Name]; ok {
		return t, nil
	}
	g, err := r.groupOf(run.Name)
	if err != nil {
		return nil, err
	}
	if err := r.trainGroup(ctx, g, data); err != nil {
		return nil, err
	}
	return r.trainings[run.Name], nil
}

// trainGroup runs the train stages of a pack's runs: those that run train together (one
// alone), and each stage is recorded as it would be alone.
func (r *runner) trainGroup(ctx context.Context, g PackGroup, data dataGen) error {
	var ts []*runTraining
	var started []*startedStage
	for _, name := range g.Runs {
		run := r.cfg.Runs[slices.IndexFunc(r.cfg.Runs, func(c RunConfig) bool { return c.Name == name })]
		t, err := r.newTraining(ctx, run, data)
		if err != nil {
			return fmt.Errorf("run %s: %w", name, err)
		}
		st, gen, err := r.beginStage(ctx, t.spec)
		if err != nil {
			return fmt.Errorf("run %s: %w", name, err)
		}
		t.gen = gen
		r.trainings[name] = t
		if st != nil || (r.plan && r.ranNow[gen] == t.spec.name) {
			ts, started = append(ts, t), append(started, st)
		}
	}
	if len(ts) > 1 {
		names := make([]string, len(ts))
		for i, t := range ts {
			names[i] = t.run.Name
		}
		for _, t := range ts {
			r.noteStage(t.spec.name, fmt.Sprintf("trains in a pack of %d, one compiled step for all: %s", len(ts), strings.Join(names, ", ")))
		}
	}
	if r.plan {
		return nil
	}
	var errs []error
	if len(ts) == 1 {
		t := ts[0]
		err := t.spec.do()
		if err == nil {
			t.gen, err = r.endStage(ctx, started[0])
		}
		if err != nil {
			return fmt.Errorf("run %s: %s: %w", t.run.Name, t.spec.name, err)
		}
		return nil
	}
	trainings := make([]trainstep.ShardTraining, len(ts))
	for i, t := range ts {
		training, err := r.shardTraining(ctx, t)
		if err != nil {
			return fmt.Errorf("run %s: %s: %w", t.run.Name, t.spec.name, err)
		}
		if i > 0 { // one progress bar for the pack
			training.Progress = progress.Options{}
		}
		trainings[i] = training
	}
	for i, res := range trainstep.TrainPackOnShards(ctx, trainings) {
		t := ts[i]
		t.sum = res.Summary
		err := res.Err
		if err == nil {
			t.gen, err = r.endStage(ctx, started[i])
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("run %s: %s: %w", t.run.Name, t.spec.name, err))
		}
	}
	return errors.Join(errs...)
}

// noteStage adds note to the reason the stage called name runs for.
func (r *runner) noteStage(name, note string) {
	for i := len(r.stages) - 1; i >= 0; i-- {
		if r.stages[i].Name == name {
			r.stages[i].Reason += "; " + note
			return
		}
	}
	r.packNotes[name] = note
}

// PlanPacks says which runs of cfg would train together, and why others would not, as Run
// decides it with the same options.
func PlanPacks(cfg *Config, opts Options) ([]PackGroup, error) {
	r, err := newRunner(cfg, opts, true)
	if err != nil {
		return nil, err
	}
	return r.packGroups()
}

// WritePacks prints packs as --plan shows them: each pack's runs and what they share, then
// the runs that train alone and why.
func WritePacks(w io.Writer, setting trainstep.Pack, packs []PackGroup) error {
	var lines []string
	n := 0
	for _, g := range packs {
		if len(g.Runs) < 2 {
			continue
		}
		n++
		line := fmt.Sprintf("  pack %d: %s (%s", n, strings.Join(g.Runs, ", "), g.Shares)
		if g.RunBytes > 0 {
			line += fmt.Sprintf("; about %s a run", progress.Bytes(g.RunBytes))
		}
		line += ")"
		if g.Why != "" {
			line += "; " + g.Why
		}
		lines = append(lines, line)
	}
	for _, g := range packs {
		if len(g.Runs) == 1 {
			lines = append(lines, fmt.Sprintf("  alone: %s (%s): %s", g.Runs[0], g.Shares, g.Why))
		}
	}
	_, err := fmt.Fprintf(w, "Training (pack: %s): %d pack(s) of runs that train together, one compiled step for all; %d run(s) alone.\n%s\n",
		setting, n, len(packs)-n, strings.Join(lines, "\n"))
	return err
}
