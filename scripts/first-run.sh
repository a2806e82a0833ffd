#!/usr/bin/env bash
# Measures what a newcomer's first `make demo` costs: a fresh clone, empty Go module and build
# caches (in a temporary folder, so nothing already downloaded or compiled helps), the build,
# then the demo. Writes key=value lines (the figures of docs/development.md, "The first run") to OUT, default
# docs/first-run.txt. The module proxy must be reachable. It takes the machine for half an
# hour on 2 cores: run it once, on a quiet machine if there is one; the load is recorded.
# Usage: scripts/first-run.sh [OUT]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=$(realpath -m "${1:-$repo/docs/first-run.txt}")
work=$(mktemp -d "${TMPDIR:-/tmp}/dcl-first-run.XXXXXX")
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

export GOCACHE=$work/gocache GOMODCACHE=$work/gomodcache GOFLAGS=-modcacherw
git clone -q "$repo" "$work/clone"
cd "$work/clone"

# The load average, sampled every 30 s while the measurement runs (others' work counts too).
(while sleep 30; do cut -d' ' -f1 /proc/loadavg; done) >"$work/load" &
sampler=$!

now() { date +%s.%N; }
t0=$(now)
make build 2>&1 | tee "$work/build.log"
t1=$(now)
make demo 2>&1 | tee "$work/demo.log"
t2=$(now)
kill "$sampler"

mib() { du -sm "$1" | cut -f1; }
load=$(sort -n "$work/load" | awk '{v[NR]=$1} END {if (NR) print v[int((NR+1)/2)]; else print "n/a"}')
{
	echo "date=$(date -u +%Y-%m-%d)"
	echo "commit=$(git rev-parse --short HEAD)"
	echo "cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)"
	echo "cores=$(nproc)"
	echo "memory_gib=$(awk '/MemTotal/ {printf "%d", $2/1048576}' /proc/meminfo)"
	echo "go=$(go env GOVERSION)"
	echo "load_median=$load"
	echo "build_s=$(echo "$t1 - $t0" | bc | cut -d. -f1)"
	echo "demo_s=$(echo "$t2 - $t1" | bc | cut -d. -f1)"
	echo "total_s=$(echo "$t2 - $t0" | bc | cut -d. -f1)"
	echo "modcache_mib=$(mib "$GOMODCACHE")"
	echo "buildcache_mib=$(mib "$GOCACHE")"
	echo "binary_mib=$(mib bin/dcl)"
	echo "demo_out_mib=$(mib demo-out)"
} >"$out"
cat "$out"
