// Package augment is the deterministic image augmentation of dcl-beam: torchvision's
// SimCLR/BYOL transforms re-implemented in pure Go on transforms.Image (HWC uint8, 1 or 3
// channels), with named presets and every parameter overridable.
//
// # Views are pure functions
//
// View k of an example in an epoch is a pure function of (Config, image, seed, key, epoch,
// view): the same inputs give byte-identical output on every run and machine. The random
// draws come from a PCG generator seeded by SHA-256 of the tuple (ViewSeed documents the
// exact bytes) and are consumed in the order Config.Sample documents; everything after the
// draws is integer arithmetic, and the few floating-point steps (crop sizes, filter weights)
// round every product explicitly and use this package's own exp and log, so neither fused
// multiply-add nor an architecture's math library can change a view.
//
// # Operations (torchvision semantics)
//
//   - RandomResizedCrop: torchvision's sampling (10 attempts, log-uniform ratio, centre-crop
//     fallback), resized with Pillow's bilinear filter, which antialiases when shrinking
//     (a 500×375 photo to 224 reads ~2 pixels per output pixel), exactly as torchvision does
//     on PIL images.
//   - Horizontal flip, folded into the resize.
//   - ColorJitter: brightness (scale), contrast (blend with the mean luma), saturation (blend
//     with the pixel's luma), hue (rotation in HSV), in a random order, as a whole with
//     probability JitterP.
//   - RandomGrayscale: ITU-R 601-2 luma (Pillow's rounding), written to all 3 channels.
//   - GaussianBlur: σ ~ U(BlurSigma), odd kernel (10% of the size by default), separable,
//     torch 'reflect' padding.
//   - Solarize: values ≥ SolarizeThreshold (128) become 255 − v.
//   - Evaluation (Config.Eval, preset "none"): resize the shorter side to EvalResize(), take
//     the centre Size×Size; no randomness.
//
// Arithmetic differs from torchvision's float32 only in rounding (results within one grey
// level, see the tests); every formula is in the comment of the function implementing it.
//
// One-channel images (MNIST, Fashion-MNIST) stay one channel: brightness, contrast, crop,
// flip, blur and solarize apply; saturation, hue and grayscale are no-ops by definition (a
// gray pixel is its own grayscale and has no hue), as in torchvision.
//
// # Presets
//
// A preset is one registration in config.go's init, which says what it sets on top of the
// common start; Presets lists them and `dcl preprocess -h` names them. They are SimCLR's for
// CIFAR and for ImageNet, the paper's own appendix ("Default DCL augmentations", which leaves
// the blur's probability and kernel unstated: SimCLR's are used), BYOL's (blur and solarize
// with a probability per view) and the evaluation transform. The view size is a parameter of
// every preset (Preset(name, size)); BYOL's "view 1" and "view 2" are view indices 0 and 1.
//
// # Flags
//
// RegisterFlags defines one flag per Config field, from Params (each field's comment names
// its flag). Overrides.Apply writes the given ones onto a preset and validates.
package augment
