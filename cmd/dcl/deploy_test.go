package main

import (
	"bytes"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/dcl-beam/dcl-beam/experiments"
)

// The scheduling recipes in deploy/, tested as far as this machine allows: each runs
// `dcl reproduce` with flags it has and a built-in config, and each keeps two reproductions
// of one run directory apart.
const deployDir = "../../deploy"

// checkReproduceArgs parses a recipe's arguments after `dcl reproduce` with the command's
// own flags, so that a renamed flag breaks this test rather than a night's run.
func checkReproduceArgs(t *testing.T, where string, args []string) map[string]string {
	t.Helper()
	fs := flag.NewFlagSet("reproduce", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	reproduceCommand().setup(fs, streams{stdout: io.Discard, stderr: io.Discard})
	if err := fs.Parse(args); err != nil {
		t.Fatalf("%s: dcl reproduce %q: %v", where, args, err)
	}
	if fs.NArg() > 0 {
		t.Errorf("%s: positional arguments %q", where, fs.Args())
	}
	set := map[string]string{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = f.Value.String() })
	if !slices.Contains(experiments.Names(), set["config"]) {
		t.Errorf("%s: --config=%q is not a built-in config (%s)", where, set["config"], strings.Join(experiments.Names(), ", "))
	}
	for _, name := range []string{"output", "gate", "rerun-on-code-change"} {
		if _, ok := set[name]; !ok {
			t.Errorf("%s: no --%s", where, name)
		}
	}
	for name := range set {
		if d, ok := fs.Lookup(name).Value.(*deprecatedFlag); ok {
			t.Errorf("%s: --%s is the deprecated name of --%s", where, name, d.now)
		}
	}
	return set
}

// reproduceArgs are the words after "reproduce" in a command line, up to a shell operator.
func reproduceArgs(t *testing.T, where, line string) []string {
	t.Helper()
	words := strings.Fields(line)
	i := slices.Index(words, "reproduce")
	if i < 1 || !strings.HasSuffix(words[i-1], "dcl") {
		t.Fatalf("%s: no `dcl reproduce` in %q", where, line)
	}
	var args []string
	for _, w := range words[i+1:] {
		if strings.ContainsAny(w, "|&;<>") {
			break
		}
		args = append(args, w)
	}
	return args
}

func readDeploy(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(deployDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The systemd service and timer pass systemd-analyze verify (with dcl's path replaced by an
// executable, which verify requires) without a single warning.
func TestSystemdUnits(t *testing.T) {
	const instance = "cifar10-batch-size"
	service, timer := readDeploy(t, "systemd/dcl-reproduce@.service"), readDeploy(t, "systemd/dcl-reproduce@.timer")
	exec := regexp.MustCompile(`(?m)^ExecStart=(.*)$`).FindStringSubmatch(service)
	if exec == nil {
		t.Fatal("the service has no ExecStart")
	}
	line := strings.NewReplacer("%i", instance, "$DCL_FLAGS", "").Replace(exec[1])
	set := checkReproduceArgs(t, "dcl-reproduce@.service", reproduceArgs(t, "ExecStart", line))
	if set["output"] != "/var/lib/dcl/runs/"+instance || set["wait-lock"] != "true" {
		t.Errorf("ExecStart: --output=%s --wait-lock=%s; want the instance's own run directory, waiting for its lock", set["output"], set["wait-lock"])
	}
	if !strings.Contains(timer, "Persistent=true") || !strings.Contains(timer, "OnCalendar=") {
		t.Error("the timer has no OnCalendar= or does not catch up on missed nights (Persistent=true)")
	}
	verifyWithSystemd(t, instance, service, timer)
}

func verifyWithSystemd(t *testing.T, instance, service, timer string) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("no systemd-analyze here (Debian package systemd): the units are not verified")
	}
	dir := t.TempDir()
	stub := filepath.Join(dir, "dcl")
	if err := os.WriteFile(stub, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"dcl-reproduce@.service": service, "dcl-reproduce@.timer": timer} {
		text = strings.ReplaceAll(text, "/usr/local/bin/dcl", stub)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(analyze, "verify", filepath.Join(dir, "dcl-reproduce@"+instance+".service"), filepath.Join(dir, "dcl-reproduce@"+instance+".timer"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	var ours []string
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.Contains(l, "dcl-reproduce") {
			ours = append(ours, l)
		}
	}
	if err != nil || len(ours) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out.String())
	} else if out.Len() > 0 {
		t.Logf("systemd-analyze verify, about other units:\n%s", out.String())
	}
}

// The crontab line has a valid schedule, no '%' (cron's newline), and runs dcl reproduce on
// a run directory, whose lock keeps a second night's run from overlapping the first.
func TestCrontabLine(t *testing.T) {
	var jobs int
	field := regexp.MustCompile(`^[0-9*,/-]+$`)
	for _, line := range strings.Split(readDeploy(t, "cron/dcl-reproduce"), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") || regexp.MustCompile(`^[A-Z_]+=`).MatchString(line) {
			continue
		}
		jobs++
		f := strings.Fields(line)
		if len(f) < 8 {
			t.Fatalf("crontab line %q: want five schedule fields, a user and a command", line)
		}
		for _, s := range f[:5] {
			if !field.MatchString(s) {
				t.Errorf("crontab line %q: schedule field %q", line, s)
			}
		}
		if strings.Contains(line, "%") {
			t.Errorf("crontab line %q has a %%, which cron turns into a newline", line)
		}
		checkReproduceArgs(t, "crontab", reproduceArgs(t, "crontab", strings.Join(f[6:], " ")))
	}
	if jobs != 1 {
		t.Errorf("%d crontab lines, want 1", jobs)
	}
}

// cronJob is the part of a Kubernetes CronJob the recipe sets, spelt as the API spells it:
// decoding with known fields only catches a misspelt key, which the API server would refuse.
type cronJob struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Spec struct {
		Schedule                   string `yaml:"schedule"`
		TimeZone                   string `yaml:"timeZone"`
		ConcurrencyPolicy          string `yaml:"concurrencyPolicy"`
		StartingDeadlineSeconds    int    `yaml:"startingDeadlineSeconds"`
		SuccessfulJobsHistoryLimit int    `yaml:"successfulJobsHistoryLimit"`
		FailedJobsHistoryLimit     int    `yaml:"failedJobsHistoryLimit"`
		JobTemplate                struct {
			Spec struct {
				BackoffLimit     int `yaml:"backoffLimit"`
				PodFailurePolicy struct {
					Rules []struct {
						Action      string `yaml:"action"`
						OnExitCodes struct {
							ContainerName string `yaml:"containerName"`
							Operator      string `yaml:"operator"`
							Values        []int  `yaml:"values"`
						} `yaml:"onExitCodes"`
					} `yaml:"rules"`
				} `yaml:"podFailurePolicy"`
				Template struct {
					Metadata struct {
						Labels map[string]string `yaml:"labels"`
					} `yaml:"metadata"`
					Spec struct {
						RestartPolicy      string `yaml:"restartPolicy"`
						ServiceAccountName string `yaml:"serviceAccountName"`
						Containers         []struct {
							Name      string   `yaml:"name"`
							Image     string   `yaml:"image"`
							Command   []string `yaml:"command"`
							Args      []string `yaml:"args"`
							Resources struct {
								Requests map[string]string `yaml:"requests"`
								Limits   map[string]string `yaml:"limits"`
							} `yaml:"resources"`
						} `yaml:"containers"`
					} `yaml:"spec"`
				} `yaml:"template"`
			} `yaml:"spec"`
		} `yaml:"jobTemplate"`
	} `yaml:"spec"`
}

// The CronJob never runs two reproductions at once (dcl's lock cannot span pods), retries a
// pod lost with its node but not a failed gate or a bad config, and runs dcl reproduce with
// flags it has.
func TestKubernetesCronJob(t *testing.T) {
	dec := yaml.NewDecoder(strings.NewReader(readDeploy(t, "kubernetes/dcl-reproduce-cronjob.yaml")))
	dec.KnownFields(true)
	var cj cronJob
	if err := dec.Decode(&cj); err != nil {
		t.Fatal(err)
	}
	if cj.APIVersion != "batch/v1" || cj.Kind != "CronJob" || cj.Metadata.Name == "" {
		t.Errorf("%s %s %q: want a named batch/v1 CronJob", cj.APIVersion, cj.Kind, cj.Metadata.Name)
	}
	if cj.Spec.ConcurrencyPolicy != "Forbid" {
		t.Errorf("concurrencyPolicy %q, want Forbid", cj.Spec.ConcurrencyPolicy)
	}
	if f := strings.Fields(cj.Spec.Schedule); len(f) != 5 {
		t.Errorf("schedule %q: want five fields", cj.Spec.Schedule)
	}
	job := cj.Spec.JobTemplate.Spec
	pod := job.Template.Spec
	if pod.RestartPolicy != "Never" || len(pod.Containers) != 1 {
		t.Fatalf("restartPolicy %q with %d containers: want Never (podFailurePolicy needs it) and one container", pod.RestartPolicy, len(pod.Containers))
	}
	c := pod.Containers[0]
	var failFast []int
	for _, r := range job.PodFailurePolicy.Rules {
		if r.Action == "FailJob" && r.OnExitCodes.Operator == "In" && r.OnExitCodes.ContainerName == c.Name {
			failFast = append(failFast, r.OnExitCodes.Values...)
		}
	}
	if !slices.Contains(failFast, exitGate) || !slices.Contains(failFast, exitUsage) || job.BackoffLimit < 1 {
		t.Errorf("podFailurePolicy fails the job at once on exit codes %v with backoffLimit %d; want %d and %d (a retry changes neither) and retries otherwise",
			failFast, job.BackoffLimit, exitUsage, exitGate)
	}
	if len(c.Command) == 0 || !strings.HasSuffix(c.Command[0], "dcl") || len(c.Args) == 0 || c.Args[0] != "reproduce" {
		t.Fatalf("container runs %q %q, want dcl reproduce", c.Command, c.Args)
	}
	set := checkReproduceArgs(t, "CronJob", c.Args[1:])
	if !strings.HasPrefix(set["output"], "gs://") {
		t.Errorf("--output=%s: want a gs:// run directory, which outlives the pod", set["output"])
	}
}
