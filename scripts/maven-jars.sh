# shellcheck shell=bash disable=SC2154 # runner, Runner, pom, lock, cache, lib, dependency_plugin: set by the sourcing script
# The pinned Maven jars of a Beam job server (sourced by scripts/flink.sh and scripts/spark.sh).
# The sourcing script sets runner (flink or spark: its make target is deps-$runner), Runner
# (its name in messages), pom and lock (deploy/$runner/pom.xml and jars.sha256), cache and lib
# (where the jars live), dependency_plugin (Maven's, pinned), and defines versions (the Beam
# and runner versions the pinned jars hold).

die() {
	echo "$runner: $*" >&2
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

need_java() {
	command -v java >/dev/null 2>&1 || die "no java here: install a Java 17 runtime (Debian: apt-get install openjdk-17-jre-headless)"
	verified || die "the $Runner jars are missing or differ from deploy/$runner/jars.sha256 in $lib: run make deps-$runner"
}

# deps fetches the jars $pom names with Maven into $lib, all or nothing: they are installed only
# when every one matches $lock.
deps() {
	if verified; then
		echo "deps-$runner: $(versions): $(wc -l <"$lock") jars found in $lib, checksums match"
		return
	fi
	if ! { command -v java && command -v mvn; } >/dev/null 2>&1; then
		SUDO=""
		[ "$(id -u)" = 0 ] || SUDO="sudo -n"
		echo "deps-$runner: installing Debian packages openjdk-17-jre-headless and maven"
		$SUDO apt-get install -y -q openjdk-17-jre-headless maven >/dev/null 2>&1 ||
			{ $SUDO apt-get update -q >/dev/null 2>&1 && $SUDO apt-get install -y -q openjdk-17-jre-headless maven >/dev/null 2>&1; } ||
			die "could not install Java 17 and Maven (needs root or sudo)"
	fi
	echo "deps-$runner: fetching $(versions) from Maven Central into $lib"
	local tmp="$cache/lib.tmp"
	rm -rf "$tmp"
	mkdir -p "$cache"
	mvn -B -q -Dstyle.color=never -f "$pom" -Dmaven.repo.local="$cache/m2" \
		"$dependency_plugin:copy-dependencies" -DoutputDirectory="$tmp" -DincludeScope=runtime ||
		die "Maven could not fetch the jars deploy/$runner/pom.xml names (see its lines above)"
	local lib_saved="$lib"
	lib="$tmp"
	if ! verified; then
		(cd "$tmp" && sha256sum -c "$lock" 2>&1 | grep -v ': OK$' | head -5) >&2 || true
		diff <(awk '{print $2}' "$lock" | sort) <(jars "$tmp") >&2 || true
		die "the fetched jars differ from deploy/$runner/jars.sha256 (above); nothing was installed"
	fi
	lib="$lib_saved"
	rm -rf "$lib" "$cache/m2"
	mv "$tmp" "$lib"
	echo "deps-$runner: $(versions): $(wc -l <"$lock") jars in $lib, checksums match"
}
