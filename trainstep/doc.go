// Package trainstep owns pretraining: the encoders (ResNet-18 with the CIFAR stem, ResNet-50,
// a small CNN for tests), the projector, the contrastive losses (InfoNCE, DCL, DCLW), the
// optimiser and learning-rate schedule, the training loop and its checkpoints. Models are
// written once in GoMLX and run on whichever backend package gpu chooses.
//
// # What other packages call
//
// Losses (the `dcl loss` and `dcl npc` subcommands): LossGraph builds a loss inside any GoMLX
// graph; LossAndGrad and LossEvaluator evaluate one on float64 embeddings and return the loss,
// the per-anchor losses, the NPC multipliers q and the gradients with respect to z1 and z2.
//
// Encoders (the `dcl embed` pipeline): LoadEncoder reads a checkpoint written by Train and
// (*Encoder).Embed maps a batch of uint8 HWC images to backbone or projection features, on the
// pure-Go backend inside Beam workers or on a GPU.
//
// # Conventions
//
// Per-anchor values come in 2N entries: the view-1 anchors of images 0..N-1, then the view-2
// anchors. Images are uint8, height × width × channels (transforms.Image's layout), 1 or 3
// channels; they are normalised per dataset inside the model graph.
package trainstep
