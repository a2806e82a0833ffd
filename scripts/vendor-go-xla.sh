#!/usr/bin/env bash
# Rebuilds third_party/go-xla from upstream go-xla at the version below and the patch files in
# third_party/go-xla-patches/ (applied in name order), so the copy is always upstream plus
# exactly those patches.
#
#   scripts/vendor-go-xla.sh          rewrite third_party/go-xla
#   scripts/vendor-go-xla.sh --check  exit 1 if third_party/go-xla is not upstream + patches
#
# Upstream comes from the Go module proxy (go mod download checks it against the checksum
# database). Left out of the copy, because dcl-beam builds none of it: docs/, examples/,
# internal/cmd/, internal/tests/, every _test.go file, every testdata/ folder and the linter's
# settings. To move to a newer go-xla: change VERSION, run the script, fix the patches that no
# longer apply (or drop those upstream has made unnecessary), and update PATCHES.md.
set -euo pipefail

VERSION=v0.4.5
MODULE=github.com/gomlx/go-xla

cd "$(dirname "$0")/.."
root=$PWD
dest=third_party/go-xla
patches=third_party/go-xla-patches
# patch_count is how many patch files the folder holds.
patch_count() {
	local files=("$root/$patches"/*.patch)
	echo "${#files[@]}"
}

check=false
case "${1:-}" in
--check) check=true ;;
"") ;;
*)
	echo "usage: $0 [--check]" >&2
	exit 2
	;;
esac

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# A module outside ours, so that go.mod's replace of go-xla does not hide upstream.
src=$(cd "$work" && GOFLAGS=-mod=mod go mod download -json "$MODULE@$VERSION" |
	sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
if [ -z "$src" ] || [ ! -d "$src" ]; then
	echo "vendor-go-xla: go mod download $MODULE@$VERSION gave no folder" >&2
	exit 1
fi

tree=$work/go-xla
cp -r "$src" "$tree"
chmod -R u+w "$tree"
rm -rf "$tree/docs" "$tree/examples" "$tree/internal/cmd" "$tree/internal/tests" "$tree/.golangci.yml"
find "$tree" -name '*_test.go' -delete
find "$tree" -type d -name testdata -prune -exec rm -rf {} +

for p in "$root/$patches"/*.patch; do
	if ! patch -s -p1 -d "$tree" --no-backup-if-mismatch <"$p"; then
		echo "vendor-go-xla: $p does not apply to $MODULE@$VERSION" >&2
		exit 1
	fi
done
cp "$root/$dest/PATCHES.md" "$tree/PATCHES.md"

if $check; then
	if ! diff -r "$tree" "$dest" >"$work/diff"; then
		echo "vendor-go-xla: $dest is not $MODULE@$VERSION plus $patches/*.patch:" >&2
		head -40 "$work/diff" >&2
		echo "vendor-go-xla: make each change a patch file in $patches, then run scripts/vendor-go-xla.sh" >&2
		exit 1
	fi
	echo "vendor-go-xla: $dest is $MODULE@$VERSION plus $(patch_count) patches"
	exit 0
fi

rm -rf "$dest.tmp"
cp -r "$tree" "$dest.tmp"
rm -rf "$dest"
mv "$dest.tmp" "$dest"
echo "vendor-go-xla: $dest rewritten from $MODULE@$VERSION and $(patch_count) patches"
