package reproduce

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/trainstep"
)

// packOff makes a config's runs train one after another.
func packOff(s string) string { return strings.Replace(s, "\ntrain:\n", "\ntrain:\n  pack: off\n", 1) }

// fourRuns makes the tiny config four runs at batch 32 that share a step (InfoNCE, DCL, DCLW
// at seed 1, and InfoNCE at seed 2: two temperatures) with kNN and the linear probe, train.pack
// set to pack.
func fourRuns(pack string) func(string) string {
	return func(s string) string {
		s = strings.Replace(s, "batch_size: 16", "batch_size: 32", 1)
		s = strings.Replace(s, "    - {name: infonce, loss: infonce}\n    - {name: dcl, loss: dcl}\n",
			"    - {name: infonce, loss: infonce, seeds: [1, 2]}\n    - {name: dcl, loss: dcl, temperature: 0.5}\n    - {name: dclw, loss: dclw}\n  pack: "+pack+"\n", 1)
		s = strings.Replace(s, "  npc: {batch_sizes: [8, 16], samples: 2}\n", "", 1)
		return strings.Replace(s, "  baselines: [raw-pixels, random-init]\n", "", 1)
	}
}

// TestPackedReproductionGivesTheSameResults: a config of four batch-32 runs that share a step
// plans them as one pack and trains them so; its results.json figures (every run's training
// loss, mean q and curves, kNN and linear accuracies) are those of the same config with
// pack: off, which plans and trains each alone. A packed reproduction stopped in training
// resumes to the same figures, and --rerun of one of its runs retrains that run alone.
func TestPackedReproductionGivesTheSameResults(t *testing.T) {
	input := t.TempDir()
	writeBarsIDX(t, input)
	ctx := context.Background()
	results := map[string]*Results{}
	outs := map[string]string{}
	for _, pack := range []string{"auto", "off"} {
		cfg := parseTiny(t, input, fourRuns(pack))
		out := t.TempDir()
		outs[pack] = out
		opts := Options{Out: out, CodeVersion: "test"}
		groups, err := PlanPacks(cfg, opts)
		if err != nil {
			t.Fatal(err)
		}
		var plan bytes.Buffer
		if err := WritePacks(&plan, cfg.Train.Pack, groups); err != nil {
			t.Fatal(err)
		}
		stages, err := Plan(ctx, cfg, opts)
		if err != nil {
			t.Fatal(err)
		}
		wantPacks := map[string]string{"auto": "1 pack(s)", "off": "0 pack(s)"}[pack]
		if !strings.Contains(plan.String(), wantPacks) {
			t.Errorf("pack: %s plans %q, want %s", pack, plan.String(), wantPacks)
		}
		train := stageNamed(t, stages, "train dclw").Reason
		if together := strings.Contains(train, "trains in a pack of 4, one compiled step for all: infonce-s1, dcl, dclw, infonce-s2"); together != (pack == "auto") {
			t.Errorf("pack: %s: the plan's train stage says %q", pack, train)
		}
		if pack == "off" && !strings.Contains(plan.String(), "alone: dclw (small-cnn width 4 projection 128, batch 32, simclr, float32, cpu, 2 epochs, checkpoint every 4 steps): pack: off") {
			t.Errorf("pack: off plans %q, want each run alone saying why", plan.String())
		}
		res, err := Run(ctx, cfg, opts)
		if err != nil {
			t.Fatal(err)
		}
		if got := stageNamed(t, res.Stages, "train infonce-s2").Reason; strings.Contains(got, "trains in a pack") != (pack == "auto") {
			t.Errorf("pack: %s: train infonce-s2 ran %q", pack, got)
		}
		var saved Results
		if err := storage.LoadJSON(ctx, filepath.Join(out, ResultsName), &saved); err != nil {
			t.Fatal(err)
		}
		results[pack] = &saved
	}
	packed, alone := results["auto"], results["off"]
	if len(packed.Runs) != 4 || len(alone.Runs) != 4 {
		t.Fatalf("%d and %d runs, want 4", len(packed.Runs), len(alone.Runs))
	}
	for i, p := range packed.Runs {
		a := alone.Runs[i]
		if p.Config.Name != a.Config.Name {
			t.Fatalf("run %d: %s packed, %s alone", i, p.Config.Name, a.Config.Name)
		}
		if p.Train.Loss != a.Train.Loss || p.Train.MeanQ != a.Train.MeanQ || p.Train.StepsDone != a.Train.StepsDone {
			t.Errorf("run %s: training packed %+v, alone %+v", p.Config.Name, p.Train, a.Train)
		}
		if !reflect.DeepEqual(p.Curves, a.Curves) {
			t.Errorf("run %s: curves packed %+v, alone %+v", p.Config.Name, p.Curves, a.Curves)
		}
		if p.KNN.Top1 != a.KNN.Top1 || p.KNN.Top5 != a.KNN.Top5 || p.Linear.Top1 != a.Linear.Top1 {
			t.Errorf("run %s: kNN %v/%v and linear %v packed, %v/%v and %v alone", p.Config.Name, p.KNN.Top1, p.KNN.Top5, p.Linear.Top1, a.KNN.Top1, a.KNN.Top5, a.Linear.Top1)
		}
	}
	if !reflect.DeepEqual(packed.Cells, alone.Cells) {
		t.Errorf("cells packed %+v, alone %+v", packed.Cells, alone.Cells)
	}

	// A packed reproduction stopped in training (every run of the pack past its step-4
	// checkpoint) resumes as one pack and ends with the uninterrupted one's figures.
	killed := t.TempDir()
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stderr := &cancelAtNth{marker: `"step":6,`, n: 4, cancel: cancel}
	if _, err := Run(cctx, parseTiny(t, input, fourRuns("auto")), Options{Out: killed, CodeVersion: "test", Stderr: stderr, TrainLog: true}); !errors.Is(err, context.Canceled) {
		t.Fatalf("the stopped reproduction returned %v, want context.Canceled", err)
	}
	resumed, err := Run(ctx, parseTiny(t, input, fourRuns("auto")), Options{Out: killed, CodeVersion: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if got := stageNamed(t, resumed.Stages, "train dclw").Reason; !strings.Contains(got, "trains in a pack of 4") {
		t.Errorf("the resumed train dclw ran %q, want it in the pack again", got)
	}
	for i, run := range resumed.Runs {
		if p := packed.Runs[i]; run.Train.Loss != p.Train.Loss || run.Train.MeanQ != p.Train.MeanQ || !reflect.DeepEqual(run.Curves, p.Curves) || run.KNN.Top1 != p.KNN.Top1 {
			t.Errorf("run %s resumed: loss %v, mean q %v, kNN %v; uninterrupted %v, %v, %v", run.Config.Name,
				run.Train.Loss, run.Train.MeanQ, run.KNN.Top1, p.Train.Loss, p.Train.MeanQ, p.KNN.Top1)
		}
	}

	// --rerun of one run of the pack retrains that run alone, to the same figures; the
	// others are not trained again.
	res, err := Run(ctx, parseTiny(t, input, fourRuns("auto")), Options{Out: outs["auto"], CodeVersion: "test", RerunStages: []string{"train dcl"}})
	if err != nil {
		t.Fatal(err)
	}
	if s := stageNamed(t, res.Stages, "train dcl"); s.Skipped || strings.Contains(s.Reason, "pack") {
		t.Errorf("--rerun 'train dcl': the stage %+v, want it trained alone", s)
	}
	for _, name := range []string{"train infonce-s1", "train dclw", "train infonce-s2"} {
		if s := stageNamed(t, res.Stages, name); !s.Skipped {
			t.Errorf("--rerun 'train dcl' ran %+v", s)
		}
	}
	for i, run := range res.Runs {
		if p := packed.Runs[i]; run.Train.Loss != p.Train.Loss || run.Train.MeanQ != p.Train.MeanQ || run.KNN.Top1 != p.KNN.Top1 {
			t.Errorf("run %s retrained: loss %v, mean q %v, kNN %v; in the pack %v, %v, %v", run.Config.Name,
				run.Train.Loss, run.Train.MeanQ, run.KNN.Top1, p.Train.Loss, p.Train.MeanQ, p.KNN.Top1)
		}
	}
}

// TestParseRerun: --rerun takes stage kinds, groups and one run's stage by its plan name,
// refuses other stages naming what it takes, and a run the config lacks is refused before
// anything runs.
func TestParseRerun(t *testing.T) {
	kinds, stages, err := ParseRerun("evaluate, train  dcl ,knn infonce-s1")
	if err != nil || !reflect.DeepEqual(stages, []string{"train dcl", "knn infonce-s1"}) || len(kinds) != 4 {
		t.Errorf("ParseRerun: %v %q %v", kinds, stages, err)
	}
	for _, bad := range []string{"train dcl x", "preprocess pretrain", "fit dcl", "trian"} {
		if _, _, err := ParseRerun(bad); err == nil || !strings.Contains(err.Error(), "unknown stage") {
			t.Errorf("ParseRerun(%q): %v, want an unknown stage", bad, err)
		}
	}
	input := t.TempDir()
	_, err = Run(context.Background(), parseTiny(t, input, fourRuns("auto")), Options{Out: t.TempDir(), RerunStages: []string{"train dlc"}})
	if err == nil || !strings.Contains(err.Error(), "no run dlc (its runs: infonce-s1, dcl, dclw, infonce-s2)") {
		t.Errorf("rerunning a run the config lacks: %v", err)
	}
}

// TestPackSetting: train.pack reads auto, off and a number of runs, refuses anything else
// naming its line, and --pack (Options.Pack) overrides it; it is no part of the fingerprint.
func TestPackSetting(t *testing.T) {
	input := t.TempDir()
	for give, want := range map[string]trainstep.Pack{"auto": trainstep.PackAuto, "off": trainstep.PackOff, "3": 3, "1": trainstep.PackOff} {
		if got := parseTiny(t, input, fourRuns(give)).Train.Pack; got != want {
			t.Errorf("pack: %s reads %v, want %v", give, got, want)
		}
	}
	for _, bad := range []string{"0", "-2", "many", "2.5"} {
		_, err := Parse(strings.NewReader(fourRuns(bad)(strings.Replace(tinyConfig, "INPUT", input, 1))), "tiny.yaml")
		if err == nil || !strings.Contains(err.Error(), "train.pack") || !strings.Contains(err.Error(), "line ") {
			t.Errorf("pack: %s: %v, want an error naming train.pack and its line", bad, err)
		}
	}
	if a, b := parseTiny(t, input, fourRuns("auto")).Fingerprint(), parseTiny(t, input, fourRuns("off")).Fingerprint(); a != b {
		t.Errorf("pack changes the fingerprint: %s and %s", a, b)
	}
	three := trainstep.Pack(3)
	r, err := newRunner(parseTiny(t, input, fourRuns("off")), Options{Out: t.TempDir(), Pack: &three}, true)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := r.packGroups()
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 2 || len(groups[0].Runs) != 3 || !strings.Contains(groups[0].Why, "pack: 3 holds at most 3 runs") {
		t.Errorf("--pack=3 over pack: off groups %+v, want a pack of 3 and one of 1", groups)
	}
}

// TestPacksFitTheDevice: a pack holds no more runs than the device's memory takes at the
// estimated size of one run's step, and says so.
func TestPacksFitTheDevice(t *testing.T) {
	r, err := newRunner(parseTiny(t, t.TempDir(), fourRuns("auto")), Options{Out: t.TempDir()}, true)
	if err != nil {
		t.Fatal(err)
	}
	need, err := r.runMemory(r.cfg.Runs[0])
	if err != nil || need <= 0 {
		t.Fatalf("one run's memory: %d, %v", need, err)
	}
	r.deviceMemory = func(string) (int64, string) { return 2*need + need/2, "the test's device" }
	groups, err := r.packGroups()
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 2 || len(groups[0].Runs) != 2 || len(groups[1].Runs) != 2 || !strings.Contains(groups[0].Why, "the test's device holds 2") {
		t.Errorf("on a device that holds two runs: %+v", groups)
	}
}
