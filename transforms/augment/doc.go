// Package augment is the deterministic image augmentation of dcl-beam: torchvision's
// SimCLR/BYOL transforms re-implemented in pure Go on transforms.Image (HWC uint8, 1 or 3
// channels), with the presets of the design and every parameter overridable.
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
//	simclr-cifar     crop scale 0.08–1, ratio 3/4–4/3, flip 0.5, jitter (0.4,0.4,0.4,0.1) p 0.8,
//	                 grayscale 0.2, no blur
//	simclr-imagenet  as simclr-cifar with jitter (0.8,0.8,0.8,0.2) and blur p 0.5
//	dcl-paper        the paper's appendix ("Default DCL augmentations": crop scale 0.08–1,
//	                 flip, jitter (0.8,0.8,0.8,0.2) p 0.8, grayscale 0.2, blur σ 0.1–2) for any
//	                 dataset: simclr-imagenet's parameters, with SimCLR's blur p 0.5 and
//	                 kernel (10% of the side), which the paper leaves unstated
//	byol             jitter (0.4,0.4,0.2,0.1) p 0.8, grayscale 0.2; blur p 1.0 on view 0 and
//	                 0.1 on view 1; solarize p 0 on view 0 and 0.2 on view 1
//	none             evaluation: resize shorter side (8/7·size when size ≥ 128, i.e. 256 for
//	                 224; else size) and centre crop
//
// The view size is a preset parameter: Preset("simclr-cifar", 32), ("simclr-imagenet", 224),
// 96 for STL-10, 28 for Fashion-MNIST. BYOL's "view 1" and "view 2" are view indices 0 and 1.
//
// # Flags
//
// RegisterFlags defines one flag per Config field (Params lists them): view-size,
// eval-resize, crop-scale=MIN,MAX, crop-ratio=MIN,MAX, flip-p, jitter-p, brightness,
// contrast, saturation, hue, gray-p, blur-p=P or P0,P1, blur-sigma=MIN,MAX, blur-kernel,
// solarize-p=P or P0,P1, solarize-threshold. Overrides.Apply writes the given ones onto a
// preset and validates.
package augment
