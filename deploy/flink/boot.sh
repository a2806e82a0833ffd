#!/bin/sh
# Beam's Go boot loader for Flink's PROCESS environment
# (--environment_config='{"command":"/path/to/boot.sh"}'). Every TaskManager names its first
# worker 1-1, and boot stages the worker binary under --semi_persist_dir (/tmp by default)
# by that id: two TaskManagers on one machine would overwrite each other's binary. Each
# worker gets a folder of its own here, removed when it exits. DCL_BEAM_BOOT is the boot
# loader (go build -o boot github.com/apache/beam/sdks/v2/go/container); by default, boot
# beside this script. DCL_BOOT_LOG, when set, records each start.
boot="${DCL_BEAM_BOOT:-$(cd "$(dirname "$0")" && pwd)/boot}"
dir="$(mktemp -d "${TMPDIR:-/tmp}/dcl-beam-worker-XXXXXX")" || exit 1
[ -n "$DCL_BOOT_LOG" ] && echo "$$ $*" >>"$DCL_BOOT_LOG"
# boot writes pipeline_options.json into its working folder: this one, not the TaskManager's.
cd "$dir" || exit 1
"$boot" --semi_persist_dir="$dir" "$@" &
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid"; rm -rf "$dir"; exit 143' TERM INT
wait "$pid"
code=$?
rm -rf "$dir"
exit "$code"
