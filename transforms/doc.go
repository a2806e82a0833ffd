// Package transforms is pure Go with no Beam: the image type every stage shares (Image, HWC
// uint8) and its colour conversions. Its subpackages read the published dataset formats
// (transforms/datasets, whose registry holds one descriptor per dataset) and make the
// deterministic image augmentations (transforms/augment, whose registry holds the presets).
// Every random draw comes from a PRNG seeded by (dataset seed, example key, epoch, view), so
// any view can be regenerated exactly.
package transforms
