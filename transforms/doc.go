// Package transforms is pure Go with no Beam: readers for the published dataset formats
// (CIFAR-10/100, STL-10, ImageNet folders and tars, plain image folders, MNIST-style IDX),
// the deterministic image augmentations and their presets (simclr-cifar, simclr-imagenet,
// byol, none), and the thin DoFns that wrap them. Every random draw comes from a PRNG seeded
// by (dataset seed, example key, epoch, view), so any view can be regenerated exactly.
package transforms
