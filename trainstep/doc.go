// Package trainstep owns pretraining: the encoders (ResNet-18 with the CIFAR stem, ResNet-50,
// a small CNN for tests), the projector, the contrastive losses (InfoNCE, DCL, DCLW), the
// optimiser and learning-rate schedule, the training loop and its checkpoints. Models are
// written once in GoMLX and run on whichever backend package gpu chooses.
package trainstep
