#!/usr/bin/env bash
# scripts/photos.sh DIR: real photographs for the GPU check's 224 px JPEG feeding test, taken
# from Debian's own packages (python3-skimage's sample data, python3-sklearn's sample
# images), so that the reader is timed on the texture of photographs rather than on
# upscaled Fashion-MNIST. Downloads the two .deb files with apt-get (no install, no root
# needed) and extracts the images into DIR. make gpu-pack puts them in .gpu/photos.
set -euo pipefail
DIR=${1:?usage: scripts/photos.sh DIR}
mkdir -p "$DIR"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
(cd "$TMP" && apt-get download python3-skimage python3-sklearn >/dev/null 2>&1) || {
	echo "photos.sh: apt-get download python3-skimage python3-sklearn failed (no Debian package index here?)" >&2
	exit 1
}
for deb in "$TMP"/*.deb; do
	dpkg-deb -x "$deb" "$TMP/root"
done
n=0
for f in skimage/data/astronaut.png skimage/data/chelsea.png skimage/data/coffee.png \
	skimage/data/motorcycle_left.png skimage/data/motorcycle_right.png \
	sklearn/datasets/images/china.jpg sklearn/datasets/images/flower.jpg; do
	src="$TMP/root/usr/lib/python3/dist-packages/$f"
	if [ -f "$src" ]; then
		cp "$src" "$DIR/"
		n=$((n + 1))
	else
		echo "photos.sh: WARNING: $f is not in this Debian's packages" >&2
	fi
done
[ "$n" -gt 0 ] || {
	echo "photos.sh: no photographs found" >&2
	exit 1
}
echo "photos.sh: $n photographs in $DIR (Debian python3-skimage and python3-sklearn)"
