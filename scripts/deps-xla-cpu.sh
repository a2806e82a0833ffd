#!/usr/bin/env bash
# Fetches XLA's CPU PJRT plugin, pinned by version and SHA-256, with the machine's pip, and
# puts its .so where the xla-cpu backend finds it (gpu/cuda.CPUPluginDir: $XDG_CACHE_HOME or
# ~/.cache, then dcl-beam/xla-cpu). Only the .so is used: no Python runs with the plugin.
#
#   scripts/deps-xla-cpu.sh          fetch it unless the pinned one is already there
#   scripts/deps-xla-cpu.sh --path   print where the plugin goes, and exit
#
# The wheel is lammps-jax-pjrt-cpu: XLA's CPU plugin built from the XLA of jaxlib 0.11.2, the
# XLA of the JAX CUDA plugin the GPU runs (docs/gpu.md says why this wheel and not another).
# Where it cannot be fetched (no pip, no network), it says so in one line and exits 0: the
# tests that need the plugin then skip, and .ci/run fails.
set -euo pipefail

WHEEL_NAME=lammps-jax-pjrt-cpu
WHEEL_VERSION=0.11.2
WHEEL_SHA256=1319390d948b39f69f7dade496b7c385149d9ca6097a6b62114da113216d9ad1
MEMBER=lammps_jax_pjrt_cpu/pjrt_c_api_cpu_plugin.so

dir=${XDG_CACHE_HOME:-$HOME/.cache}/dcl-beam/xla-cpu
plugin=$dir/pjrt_c_api_cpu_plugin.so
# The stamp beside the plugin names the wheel it came from: what the backend and `dcl doctor`
# report as the plugin's version, and what makes a second run a no-op.
stamp=$plugin.wheel
want="$WHEEL_NAME==$WHEEL_VERSION sha256:$WHEEL_SHA256"

case "${1:-}" in
--path)
	echo "$plugin"
	exit 0
	;;
"") ;;
*)
	echo "usage: $0 [--path]" >&2
	exit 2
	;;
esac

if [ -f "$plugin" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
	echo "deps: XLA CPU plugin found ($WHEEL_NAME $WHEEL_VERSION) in $dir"
	exit 0
fi

skip() {
	echo "deps: WARNING: XLA CPU plugin not installed: $1; the xla-cpu tests will skip (.ci/run fails without it)"
	exit 0
}

py=$(command -v python3 || true)
[ -n "$py" ] || skip "no python3 here to run pip"
"$py" -m pip --version >/dev/null 2>&1 || skip "python3 has no pip (Debian: apt-get install python3-pip)"

mkdir -p "$dir"
work=$(mktemp -d "$dir/.fetch.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "$WHEEL_NAME==$WHEEL_VERSION --hash=sha256:$WHEEL_SHA256" >"$work/requirements.txt"
echo "deps: fetching $WHEEL_NAME $WHEEL_VERSION (about 63 MB) with pip, checked against its SHA-256"
if ! "$py" -m pip download --quiet --no-deps --require-hashes --only-binary=:all: \
	--platform manylinux_2_27_x86_64 --python-version 3 --implementation py \
	-d "$work/wheel" -r "$work/requirements.txt" >"$work/pip.log" 2>&1; then
	skip "pip download failed: $(grep -m1 -E 'ERROR|error' "$work/pip.log" || tail -1 "$work/pip.log")"
fi
wheels=("$work"/wheel/*.whl)
whl=${wheels[0]}
[ -f "$whl" ] || skip "pip downloaded no wheel"
# pip checked the hash; checked again here so that a wheel pip took from a local folder of
# wheels is held to the pin too.
got=$(sha256sum "$whl" | cut -d' ' -f1)
[ "$got" = "$WHEEL_SHA256" ] || skip "$whl has SHA-256 $got, want $WHEEL_SHA256"
"$py" - "$whl" "$MEMBER" "$work/plugin.so" <<'PY' || skip "cannot extract $MEMBER from $(basename "$whl")"
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
mv "$work/plugin.so" "$plugin"
echo "$want" >"$stamp.tmp" && mv "$stamp.tmp" "$stamp"
echo "deps: XLA CPU plugin installed: $plugin ($WHEEL_NAME $WHEEL_VERSION)"
