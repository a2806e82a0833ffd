#!/usr/bin/env bash
# Beam's Spark job server, from Maven Central's jars (docs/runners.md).
#
#   scripts/spark.sh deps                  fetch the jars deploy/spark/pom.xml names into the cache
#                                           and check them against deploy/spark/jars.sha256
#   scripts/spark.sh versions              the Beam and Spark versions the pinned jars hold
#   scripts/spark.sh check                 exit 0 when Java and the pinned jars are here, else say
#                                           what is missing and exit 1
#   scripts/spark.sh jobserver PORT MASTER Beam's Spark job server on 127.0.0.1:PORT, running jobs
#                                           on the Spark master MASTER (local[N]: in its own JVM)
#
# jobserver replaces this shell by the JVM (exec), so a caller's process id is the JVM's.
# SPARK_CACHE (default .cache/spark in the repository) holds the jars; SPARK_HEAP caps the
# JVM's heap (default 1g). The JVM keeps its files under TMPDIR (default /tmp).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
pom="$root/deploy/spark/pom.xml"
lock="$root/deploy/spark/jars.sha256"
cache="${SPARK_CACHE:-$root/.cache/spark}"
lib="$cache/lib"
heap="${SPARK_HEAP:-1g}"
tmp="${TMPDIR:-/tmp}"
# Maven's dependency plugin, pinned like the jars it fetches.
dependency_plugin="org.apache.maven.plugins:maven-dependency-plugin:3.6.1"
runner=spark
Runner=Spark
# die, jars, verified, need_java, deps
# shellcheck source=scripts/maven-jars.sh
source "$root/scripts/maven-jars.sh"

# Spark 3.2 on Java 17 reflects into these JDK packages (Spark's own launcher opens them too).
java_opens=(
	--add-opens=java.base/java.lang=ALL-UNNAMED
	--add-opens=java.base/java.lang.invoke=ALL-UNNAMED
	--add-opens=java.base/java.lang.reflect=ALL-UNNAMED
	--add-opens=java.base/java.io=ALL-UNNAMED
	--add-opens=java.base/java.net=ALL-UNNAMED
	--add-opens=java.base/java.nio=ALL-UNNAMED
	--add-opens=java.base/java.util=ALL-UNNAMED
	--add-opens=java.base/java.util.concurrent=ALL-UNNAMED
	--add-opens=java.base/sun.nio.ch=ALL-UNNAMED
	--add-opens=java.base/sun.nio.cs=ALL-UNNAMED
	--add-opens=java.base/sun.security.action=ALL-UNNAMED
	--add-opens=java.base/sun.util.calendar=ALL-UNNAMED
)

versions() {
	local beam spark
	beam="$(grep -oE 'beam-runners-spark-3-[0-9.]+\.jar' "$lock" | sed -E 's/^beam-runners-spark-3-(.*)\.jar$/\1/')"
	spark="$(grep -oE 'spark-core_2.12-[0-9.]+\.jar' "$lock" | sed -E 's/^spark-core_2.12-(.*)\.jar$/\1/')"
	echo "Beam Spark job server $beam (beam-runners-spark-3), Spark $spark"
}

case "${1:-}" in
deps) deps ;;
versions) versions ;;
check)
	need_java
	versions
	;;
jobserver)
	[ $# -ge 3 ] || die "usage: scripts/spark.sh jobserver PORT MASTER"
	need_java
	exec java -Xmx"$heap" -Djava.io.tmpdir="$tmp" "${java_opens[@]}" -cp "$lib/*" org.apache.beam.runners.spark.SparkJobServerDriver \
		--job-host=127.0.0.1 --job-port="$2" --artifact-port=0 --expansion-port=-1 \
		--artifacts-dir="$tmp/beam-artifact-staging" --spark-master-url="$3"
	;;
*)
	sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
	exit 2
	;;
esac
