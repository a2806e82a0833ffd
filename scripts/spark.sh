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

die() {
	echo "spark: $*" >&2
	exit 1
}

# jars lists the files in folder $1 by name, sorted.
jars() {
	find "$1" -mindepth 1 -maxdepth 1 -printf '%f\n' | sort
}

# verified says whether $lib holds exactly the pinned jars, each with its pinned checksum.
verified() {
	[ -d "$lib" ] || return 1
	diff -q <(awk '{print $2}' "$lock" | sort) <(jars "$lib") >/dev/null 2>&1 || return 1
	(cd "$lib" && sha256sum --quiet -c "$lock") >/dev/null 2>&1
}

versions() {
	local beam spark
	beam="$(grep -oE 'beam-runners-spark-3-[0-9.]+\.jar' "$lock" | sed -E 's/^beam-runners-spark-3-(.*)\.jar$/\1/')"
	spark="$(grep -oE 'spark-core_2.12-[0-9.]+\.jar' "$lock" | sed -E 's/^spark-core_2.12-(.*)\.jar$/\1/')"
	echo "Beam Spark job server $beam (beam-runners-spark-3), Spark $spark"
}

need_java() {
	command -v java >/dev/null 2>&1 || die "no java here: install a Java 17 runtime (Debian: apt-get install openjdk-17-jre-headless)"
	verified || die "the Spark jars are missing or differ from deploy/spark/jars.sha256 in $lib: run make deps-spark"
}

deps() {
	if verified; then
		echo "deps-spark: $(versions): $(wc -l <"$lock") jars found in $lib, checksums match"
		return
	fi
	if ! { command -v java && command -v mvn; } >/dev/null 2>&1; then
		SUDO=""
		[ "$(id -u)" = 0 ] || SUDO="sudo -n"
		echo "deps-spark: installing Debian packages openjdk-17-jre-headless and maven"
		$SUDO apt-get install -y -q openjdk-17-jre-headless maven >/dev/null 2>&1 ||
			{ $SUDO apt-get update -q >/dev/null 2>&1 && $SUDO apt-get install -y -q openjdk-17-jre-headless maven >/dev/null 2>&1; } ||
			die "could not install Java 17 and Maven (needs root or sudo)"
	fi
	echo "deps-spark: fetching $(versions) from Maven Central into $lib"
	local tmp="$cache/lib.tmp"
	rm -rf "$tmp"
	mkdir -p "$cache"
	mvn -B -q -Dstyle.color=never -f "$pom" -Dmaven.repo.local="$cache/m2" \
		"$dependency_plugin:copy-dependencies" -DoutputDirectory="$tmp" -DincludeScope=runtime ||
		die "Maven could not fetch the jars deploy/spark/pom.xml names (see its lines above)"
	local lib_saved="$lib"
	lib="$tmp"
	if ! verified; then
		(cd "$tmp" && sha256sum -c "$lock" 2>&1 | grep -v ': OK$' | head -5) >&2 || true
		diff <(awk '{print $2}' "$lock" | sort) <(jars "$tmp") >&2 || true
		die "the fetched jars differ from deploy/spark/jars.sha256 (above); nothing was installed"
	fi
	lib="$lib_saved"
	rm -rf "$lib" "$cache/m2"
	mv "$tmp" "$lib"
	echo "deps-spark: $(versions): $(wc -l <"$lock") jars in $lib, checksums match"
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
