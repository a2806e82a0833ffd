#!/usr/bin/env bash
# The GPU check, in one command, on a machine with an NVIDIA GPU, Python 3 with
# PyTorch (and JAX's CUDA plugin, whose PJRT plugin dcl loads), and no Go:
#
#   make gpu-pack                        # on a machine with Go: .gpu/ (dcl-cuda.xz, fashion-mnist/)
#   # copy the repository with .gpu/ to the GPU machine, then, from the repository root:
#   scripts/gpu-check.sh OUTDIR [all|check|experiment|eval]
#
# Steps, each with its own time limit; a failing step is recorded and the next one still runs:
#   1. unpack .gpu/dcl-cuda.xz;
#   2. dcl doctor (and, if CUDA does not load, again with the pip nvidia/*/lib folders on
#      LD_LIBRARY_PATH and with XLA's log on, to say what was missing);
#   3. python3 scripts/torch_step.py: PyTorch's images/s and memory for the same steps;
#   4. dcl gpu-check: CPU/CUDA agreement (float32 and tf32), images/s beside PyTorch, dcl
#      train's loop, feeding, peak memory;
#   5. dcl reproduce --config=fashion-mnist-gpu: the experiment (InfoNCE vs DCL, batch 32 and 256),
#      then its state (dcl reproduce --save-state), sent back even when the time limit stopped it.
#   6. (eval only) a short dcl reproduce --config=fashion-mnist-gpu-eval --backend=cuda, afresh:
#      each stage's seconds and images/s into reproduce-stages.json (docs/gpu/reproduce-stages.json
#      feeds BENCHMARKS.md's table: see reproduce/stagetimes_test.go), then dcl agree twice on its
#      first run's encoder, CUDA against the CPU within the derived tolerance: --precision=tf32
#      (as the run trained and embedded) and --precision=float32.
# "check" runs 1-4, "experiment" 1, 2 and 5, "eval" 1, 2 and 6 (within 9 minutes: EVAL_TIMEOUT and
# twice AGREE_TIMEOUT), "all" (the default) 1-5. The unpacked
# binary and the experiment's run directory live in .gpu-work/ (outside the pack, so .gpu/
# stays what is copied). Stopped by its time limit, the experiment continues where it stopped
# when run again: on the same machine from .gpu-work/experiment, on a fresh one from the state
# an earlier run sent back (OUTDIR/experiment-state.tgz), put at .gpu-state/experiment-state.tgz
# (DCL_EXPERIMENT_STATE) and carried with the repository: runs trained and evaluated before are
# kept, a run that was stopped is trained again, the data are made again (identical).
#
# OUTDIR receives at most 8 files: summary.md (what ran, how long, exit codes, the doctor's
# report), run.log (every step's output), doctor.json, torch-step.json, gpu-check.json,
# gpu-check.md, experiment-report.md, experiment-state.tgz (results.json, report.md, plots/,
# each finished run's log and evaluations, the stage ledger and history: unpack it and run
# make docs GPU_RUN=DIR there); for eval: summary.md, run.log, doctor.json,
# reproduce-stages.json, agreement-tf32.json, agreement-float32.json.
#
# DCL_BACKEND=xla-cpu runs every step on XLA's CPU plugin (make deps installs it) in place of
# CUDA, on any machine: the same binary, go-xla and StableHLO, so every GPU command is known to
# work before it meets a GPU; the check is then sized for a CPU (--quick), and PyTorch runs on
# the CPU or, without torch, its step fails and the rest goes on.
#
# Environment: DCL_BACKEND (cuda), DCL_GPU_PACK (default .gpu), DCL_GPU_WORK (default .gpu-work), PYTHON (python3),
# CHECK_TIMEOUT (360 s), TORCH_TIMEOUT (240 s), TORCH_COMPILE_BUDGET (90 s of torch.compile
# rows), EXPERIMENT_TIMEOUT (480 s: the experiment is sized for 8 minutes, so that the part
# "experiment" fits one 9-minute command), DCL_EXPERIMENT_STATE (.gpu-state/experiment-state.tgz),
# DCL_EXPERIMENT_CONFIG (fashion-mnist-gpu; tests give a smaller one), EVAL_TIMEOUT (360 s),
# AGREE_TIMEOUT (60 s, each of two); the check part ends within
# about 9 minutes, and the check writes its JSON after every part, so a time limit keeps what was
# measured; extra flags for each program, appended last so they win: DCL_GPU_CHECK_FLAGS,
# DCL_TORCH_FLAGS, DCL_EXPERIMENT_FLAGS, DCL_EVAL_FLAGS, DCL_AGREE_FLAGS (the script's own tests
# run it on a CPU with --backend=cpu --quick, --backend=cpu, and a tiny config).
set -u -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ $# -lt 1 ]; then
	echo "usage: scripts/gpu-check.sh OUTDIR [all|check|experiment|eval]" >&2
	exit 2
fi
OUT=$1
PART=${2:-all}
case $PART in all | check | experiment | eval) ;; *)
	echo "gpu-check.sh: unknown part $PART: want all, check, experiment or eval" >&2
	exit 2
	;;
esac
PACK=${DCL_GPU_PACK:-$ROOT/.gpu}
WORK=${DCL_GPU_WORK:-$ROOT/.gpu-work}
PYTHON=${PYTHON:-python3}
BACKEND=${DCL_BACKEND:-cuda}
case $BACKEND in cuda | xla-cpu) ;; *)
	echo "gpu-check.sh: DCL_BACKEND=$BACKEND: want cuda or xla-cpu" >&2
	exit 2
	;;
esac
# On XLA's CPU plugin the check's full-size rows would take hours on a few cores.
CHECK_SIZE=()
TORCH_DEVICE=()
[ "$BACKEND" = xla-cpu ] && CHECK_SIZE=(--quick) && TORCH_DEVICE=(--device cpu --quick --warmup 1 --steps 1 --compile "")
DATA=$PACK/fashion-mnist
mkdir -p "$OUT" "$WORK" || exit 1
OUT=$(cd "$OUT" && pwd)
LOG=$OUT/run.log
SUMMARY=$OUT/summary.md
DCL=$WORK/dcl-cuda
FAILED=0

log() { echo "gpu-check.sh: $*" | tee -a "$LOG" >&2; }

{
	echo "# scripts/gpu-check.sh $*"
	echo
	echo "- started $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), $(nproc) CPUs, part: $PART"
	echo "- GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo 'nvidia-smi failed or missing')"
	echo "- Python: $($PYTHON --version 2>&1)"
	echo
	echo "| step | exit | seconds | command |"
	echo "|---|---|---|---|"
} >>"$SUMMARY" # appended: the two halves (check, experiment) can share one OUTDIR

# step NAME LIMIT CMD...: runs CMD with a time limit, its output into run.log, and records the
# exit status and duration in summary.md. It never stops the script.
step() {
	local name=$1 limit=$2
	shift 2
	log "== $name (limit ${limit}s): $*"
	local start=$SECONDS
	timeout --kill-after=30 "$limit" "$@" >>"$LOG" 2>&1
	local rc=$?
	local took=$((SECONDS - start))
	local note=""
	[ $rc -eq 124 ] && note=" (time limit)"
	echo "| $name | $rc$note | $took | \`$*\` |" >>"$SUMMARY"
	log "== $name: exit $rc$note after ${took}s"
	[ $rc -ne 0 ] && FAILED=$((FAILED + 1))
	return $rc
}

# 1. Unpack the binary (again only when the pack is newer).
if [ ! -x "$DCL" ] || [ "$PACK/dcl-cuda.xz" -nt "$DCL" ]; then
	if command -v xz >/dev/null 2>&1; then
		step unpack 120 bash -c "xz -dc '$PACK/dcl-cuda.xz' >'$DCL.tmp' && chmod +x '$DCL.tmp' && mv '$DCL.tmp' '$DCL'"
	else
		step unpack 120 "$PYTHON" -c "import lzma, os, shutil, sys; src, dst = sys.argv[1:]; shutil.copyfileobj(lzma.open(src), open(dst + '.tmp', 'wb')); os.chmod(dst + '.tmp', 0o755); os.replace(dst + '.tmp', dst)" "$PACK/dcl-cuda.xz" "$DCL"
	fi
fi
if [ ! -x "$DCL" ]; then
	log "no dcl-cuda binary: run make gpu-pack and copy .gpu/ here"
	exit 1
fi
[ -f "$DATA/train-images-idx3-ubyte.gz" ] || log "WARNING: no Fashion-MNIST in $DATA: feeding uses random images and the experiment cannot run"

# 2. The doctor. dcl-cuda opens the plugin's libraries from the pip nvidia/ tree by itself; if
# CUDA still does not load, try once more with those folders on LD_LIBRARY_PATH (and XLA's
# log on): if that works, the rest runs with it and the summary says so (a bug to fix in
# gpu/cuda).
step doctor 180 "$DCL" doctor
"$DCL" doctor --json >"$OUT/doctor.json" 2>>"$LOG"
if [ "$BACKEND" = cuda ] && ! grep -q '"cuda_available": true' "$OUT/doctor.json"; then
	NVLIBS=$("$PYTHON" - <<'PY' 2>/dev/null
import glob, os, site, sysconfig
dirs = []
for sp in [sysconfig.get_paths()["purelib"]] + site.getsitepackages():
    for d in sorted(glob.glob(os.path.join(sp, "nvidia", "*", "lib"))):
        if d not in dirs:
            dirs.append(d)
print(":".join(dirs))
PY
	)
	log "CUDA not available as is; retrying with LD_LIBRARY_PATH=${NVLIBS:-(no pip nvidia folders found)} and TF_CPP_MIN_LOG_LEVEL=0"
	if [ -n "$NVLIBS" ]; then
		export LD_LIBRARY_PATH="$NVLIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
		TF_CPP_MIN_LOG_LEVEL=0 step doctor-ld-library-path 180 "$DCL" doctor
		if "$DCL" doctor --json 2>>"$LOG" | grep -q '"cuda_available": true'; then
			echo "- **CUDA loaded only with the pip nvidia/*/lib folders on LD_LIBRARY_PATH**: dcl's own preloading missed something (see run.log)" >>"$SUMMARY"
		else
			unset LD_LIBRARY_PATH
		fi
	fi
	step jax-devices 180 "$PYTHON" -c "import jax; print(jax.devices())"
fi

if [ "$PART" = all ] || [ "$PART" = check ]; then
	# 3. PyTorch, first, so that gpu-check can put its figures beside dcl's.
	# shellcheck disable=SC2086 # the extra flags are words
	step torch "${TORCH_TIMEOUT:-240}" "$PYTHON" "$ROOT/scripts/torch_step.py" --out "$OUT/torch-step.json" \
		--compile-budget "${TORCH_COMPILE_BUDGET:-90}" "${TORCH_DEVICE[@]}" ${DCL_TORCH_FLAGS:-}
	# 4. The check.
	TORCH_ARG=()
	[ -s "$OUT/torch-step.json" ] && TORCH_ARG=(--torch="$OUT/torch-step.json")
	DATA_ARG=()
	[ -f "$DATA/train-images-idx3-ubyte.gz" ] && DATA_ARG=(--input="$DATA")
	[ -d "$PACK/photos" ] && DATA_ARG+=(--photos="$PACK/photos")
	# shellcheck disable=SC2086
	step gpu-check "${CHECK_TIMEOUT:-360}" "$DCL" gpu-check --backend="$BACKEND" "${CHECK_SIZE[@]}" --output="$OUT" "${DATA_ARG[@]}" "${TORCH_ARG[@]}" \
		--record="$PYTHON scripts/torch_step.py --out OUT/torch-step.json ${DCL_TORCH_FLAGS:-}" ${DCL_GPU_CHECK_FLAGS:-}
fi

if [ "$PART" = all ] || [ "$PART" = experiment ]; then
	# 5. The experiment. It continues from $WORK/experiment when run again here, or from the
	# state an earlier run sent back when this machine has none (reproduce --restore-state).
	CONFIG=${DCL_EXPERIMENT_CONFIG:-fashion-mnist-gpu}
	STATE_IN=${DCL_EXPERIMENT_STATE:-$ROOT/.gpu-state/experiment-state.tgz}
	if [ -f "$DATA/train-images-idx3-ubyte.gz" ]; then
		RESTORE=()
		[ -f "$STATE_IN" ] && RESTORE=(--restore-state="$STATE_IN") && log "continuing from $STATE_IN unless $WORK/experiment holds a reproduction"
		# shellcheck disable=SC2086
		step experiment "${EXPERIMENT_TIMEOUT:-480}" "$DCL" reproduce --config="$CONFIG" --input="$DATA" \
			--output="$WORK/experiment" --backend="$BACKEND" --progress=off "${RESTORE[@]}" ${DCL_EXPERIMENT_FLAGS:-}
		step experiment-state 120 "$DCL" reproduce --config="$CONFIG" --output="$WORK/experiment" --save-state="$OUT/experiment-state.tgz"
		cp "$WORK/experiment/report.md" "$OUT/experiment-report.md" 2>/dev/null ||
			log "the experiment wrote no report yet: run the same command again (with .gpu-state/experiment-state.tgz from this OUTDIR on a fresh machine) to continue it"
	else
		log "skipping the experiment: no Fashion-MNIST in $DATA"
		FAILED=$((FAILED + 1))
	fi
fi

case $PART in eval)
	# 6. Evaluation on the GPU: a short reproduction from scratch (its stage times are the
	# measurement, so nothing is reused), then CUDA against the CPU on its first run's encoder.
	if [ -f "$DATA/train-images-idx3-ubyte.gz" ]; then
		EVAL=$WORK/eval
		rm -rf "$EVAL"
		# shellcheck disable=SC2086
		step eval-reproduce "${EVAL_TIMEOUT:-360}" "$DCL" reproduce --config=fashion-mnist-gpu-eval --input="$DATA" \
			--output="$EVAL" --backend="$BACKEND" --progress=off --stage-times="$OUT/reproduce-stages.json" ${DCL_EVAL_FLAGS:-}
		FIRST=$(find "$EVAL/runs" -mindepth 1 -maxdepth 1 -type d 2>/dev/null | sort | head -n 1)
		if [ -n "$FIRST" ]; then
			# CUDA in the precision the run trained and embedded in (TF32 tensor cores: TF32's
			# tolerance), then in full float32 (XLA precision HIGHEST: float32's, much tighter).
			for PREC in tf32 float32; do
				# shellcheck disable=SC2086
				step "eval-agree-$PREC" "${AGREE_TIMEOUT:-60}" "$DCL" agree --checkpoint="$FIRST" --train="$EVAL/data/eval-train" \
					--test="$EVAL/data/eval-test" --a="$BACKEND" --b=cpu --precision="$PREC" --output="$OUT/agreement-$PREC.json" ${DCL_AGREE_FLAGS:-}
			done
		else
			log "no trained run in $EVAL/runs: skipping the agreement check"
			FAILED=$((FAILED + 1))
		fi
		{
			echo
			echo "## Stages (seconds and images/s: reproduce-stages.json)"
			echo
			grep -o 'stage="[^"]*" wall=[^ ]*\( images_per_s=[^ ]*\)\?' "$LOG" | sed 's/^/- /' || true
		} >>"$SUMMARY"
	else
		log "skipping the evaluation: no Fashion-MNIST in $DATA"
		FAILED=$((FAILED + 1))
	fi
	;;
esac

{
	echo
	echo "- finished $(date -u +%Y-%m-%dT%H:%M:%SZ); $FAILED step(s) failed"
	echo
	echo "## dcl doctor"
	echo
	echo '```'
	"$DCL" doctor --no-load 2>&1
	echo '```'
	[ -f "$OUT/gpu-check.md" ] && { echo; cat "$OUT/gpu-check.md"; }
} >>"$SUMMARY"
# Keep the log within what can be carried back (16 MiB a file).
if [ "$(stat -c %s "$LOG")" -gt $((15 * 1024 * 1024)) ]; then
	tail -c $((15 * 1024 * 1024)) "$LOG" >"$LOG.tmp" && mv "$LOG.tmp" "$LOG"
fi
log "done: $FAILED step(s) failed; results in $OUT"
[ "$FAILED" -eq 0 ]
