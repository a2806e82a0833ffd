#!/usr/bin/env bash
# Beam's Flink job server and a Flink session cluster, from Maven Central's jars (docs/flink.md).
#
#   scripts/flink.sh deps                       fetch the jars deploy/flink/pom.xml names into the
#                                                cache and check them against deploy/flink/jars.sha256
#   scripts/flink.sh versions                   the Beam and Flink versions the pinned jars hold
#   scripts/flink.sh check                      exit 0 when Java and the pinned jars are here, else
#                                                say what is missing and exit 1
#   scripts/flink.sh jobserver PORT MASTER [CONF_DIR]
#                                                Beam's Flink job server on 127.0.0.1:PORT, submitting
#                                                to MASTER ([local]: an embedded Flink; HOST:PORT: a
#                                                cluster's REST address), Flink settings from CONF_DIR
#   scripts/flink.sh jobmanager CONF_DIR        a standalone session cluster's JobManager
#   scripts/flink.sh taskmanager CONF_DIR ID    one of its TaskManagers
#
# The last three replace this shell by the JVM (exec), so a caller's process id is the JVM's.
# FLINK_CACHE (default .cache/flink in the repository) holds the jars; FLINK_HEAP caps each
# JVM's heap (default 512m). The JVMs keep their files (Flink's blob store, working folders
# and caches) under TMPDIR (default /tmp), and the job server the artifacts of each job (the
# worker binary) under FLINK_ARTIFACTS (default TMPDIR/beam-artifact-staging), which every
# TaskManager must reach.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
pom="$root/deploy/flink/pom.xml"
lock="$root/deploy/flink/jars.sha256"
cache="${FLINK_CACHE:-$root/.cache/flink}"
lib="$cache/lib"
heap="${FLINK_HEAP:-512m}"
tmp="${TMPDIR:-/tmp}"
artifacts="${FLINK_ARTIFACTS:-$tmp/beam-artifact-staging}"
# Maven's dependency plugin, pinned like the jars it fetches.
dependency_plugin="org.apache.maven.plugins:maven-dependency-plugin:3.6.1"
runner=flink
Runner=Flink
# die, jars, verified, need_java, deps
# shellcheck source=scripts/maven-jars.sh
source "$root/scripts/maven-jars.sh"

# Flink 1.19 on Java 17 reflects into these JDK packages (Flink's own scripts open them too).
java_opens=(
	--add-opens=java.base/java.lang=ALL-UNNAMED
	--add-opens=java.base/java.lang.reflect=ALL-UNNAMED
	--add-opens=java.base/java.io=ALL-UNNAMED
	--add-opens=java.base/java.net=ALL-UNNAMED
	--add-opens=java.base/java.nio=ALL-UNNAMED
	--add-opens=java.base/java.util=ALL-UNNAMED
	--add-opens=java.base/java.util.concurrent=ALL-UNNAMED
	--add-opens=java.base/sun.nio.ch=ALL-UNNAMED
)

versions() {
	local beam flink
	beam="$(grep -oE 'beam-runners-flink-[0-9.]+-[0-9.]+\.jar' "$lock" | sed -E 's/^beam-runners-flink-([0-9.]+)-([0-9.]+)\.jar$/\2 (beam-runners-flink-\1)/')"
	flink="$(grep -oE 'flink-runtime-[0-9.]+\.jar' "$lock" | sed -E 's/^flink-runtime-(.*)\.jar$/\1/')"
	echo "Beam Flink job server $beam, Flink $flink"
}

case "${1:-}" in
deps) deps ;;
versions) versions ;;
check)
	need_java
	versions
	;;
jobserver)
	[ $# -ge 3 ] || die "usage: scripts/flink.sh jobserver PORT MASTER [CONF_DIR]"
	need_java
	conf=()
	[ -n "${4:-}" ] && conf=(--flink-conf-dir="$4")
	exec java -Xmx"$heap" -Djava.io.tmpdir="$tmp" "${java_opens[@]}" -cp "$lib/*" org.apache.beam.runners.flink.FlinkJobServerDriver \
		--job-host=127.0.0.1 --job-port="$2" --artifact-port=0 --expansion-port=-1 --artifacts-dir="$artifacts" \
		--flink-master="$3" "${conf[@]}"
	;;
jobmanager)
	[ $# -ge 2 ] || die "usage: scripts/flink.sh jobmanager CONF_DIR"
	need_java
	exec java -Xmx"$heap" -Djava.io.tmpdir="$tmp" "${java_opens[@]}" -cp "$lib/*" \
		org.apache.flink.runtime.entrypoint.StandaloneSessionClusterEntrypoint --configDir "$2"
	;;
taskmanager)
	[ $# -ge 3 ] || die "usage: scripts/flink.sh taskmanager CONF_DIR ID"
	need_java
	# The JVM's limits match the memory the configuration gives the TaskManager (Flink's own
	# scripts derive them the same way): heap = framework + task heap, direct = framework +
	# task off-heap + network.
	exec java -Xmx"$heap" -XX:MaxDirectMemorySize="${FLINK_DIRECT:-640m}" -Djava.io.tmpdir="$tmp" "${java_opens[@]}" -cp "$lib/*" \
		org.apache.flink.runtime.taskexecutor.TaskManagerRunner --configDir "$2" -Dtaskmanager.resource-id="$3"
	;;
*)
	sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'
	exit 2
	;;
esac
