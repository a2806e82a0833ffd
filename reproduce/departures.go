package reproduce

import (
	"fmt"
	"slices"
	"strings"

	"github.com/dcl-beam/dcl-beam/pipelines"
	"github.com/dcl-beam/dcl-beam/trainstep"
	"github.com/dcl-beam/dcl-beam/transforms/augment"
	"github.com/dcl-beam/dcl-beam/transforms/datasets"
)

// RecipeSetting is one setting of the paper's recipe that a config may depart from, or
// choose where the paper states nothing: a key of a config's departures.
type RecipeSetting struct {
	Name string
	// Covers says what the setting takes in, for the reference of config keys.
	Covers string
}

// RecipeSettings are the keys of Config.Departures, in the order the reference lists them.
var RecipeSettings = []RecipeSetting{
	{"data", "the dataset, its splits and subsets (ImageNet-100's class list), the image size"},
	{"model", "the backbone, its stem and width"},
	{"projector", "the projection head: its layers, widths and output dimension"},
	{"augment", "the pretraining augmentation (crop, flip, colour jitter, grayscale, blur)"},
	{"method", "the training method and its settings (MoCo's key encoder and queue, NNCLR's predictor and support set)"},
	{"loss", "the loss's form beyond τ: DCLW's weights and their gradient"},
	{"reduction", "how the per-anchor losses become one: the paper's sum, or a mean"},
	{"temperature", "τ"},
	{"optimizer", "the optimiser"},
	{"lr", "the learning rate"},
	{"momentum", "the optimiser's momentum"},
	{"weight_decay", "weight decay"},
	{"schedule", "the learning-rate schedule and its warm-up"},
	{"epochs", "pretraining epochs"},
	{"batch_size", "the batch sizes"},
	{"queue_size", "MoCo's queue or NNCLR's support set"},
	{"evaluation", "which evaluations are reported"},
	{"knn", "the kNN protocol: k, T, the similarity and the features"},
	{"linear", "the linear protocol: its optimiser, epochs, schedule and what it trains on"},
	{"precision", "the training arithmetic"},
	{"seeds", "training seeds"},
}

// recipeSettingNames are RecipeSettings' names.
func recipeSettingNames() []string {
	names := make([]string, len(RecipeSettings))
	for i, s := range RecipeSettings {
		names[i] = s.Name
	}
	return names
}

// toolkitDepartures are the recipe choices that this toolkit's code makes, wherever a config
// uses the part that makes them, each with the paper's text beside it: they are no config's
// values, so they are written here once and the report prints them beside every config's own
// departures where they apply.
func toolkitDepartures(c *Config) map[string]string {
	out := map[string]string{
		"reduction": "each step's loss is the mean over the 2N anchors; the paper's is their sum (\"the overall loss function is " +
			"L = Σ_{k, i} L_i^(k)\", Section 3). With SGD the sum's gradients are 2N times the mean's, so a base learning rate " +
			"tuned for one is not the other's.",
		"projector": fmt.Sprintf("Linear (no bias) → batch norm → ReLU → Linear to %d, the hidden layer as wide as the backbone's features "+
			"(SimCLR's projector, with batch norm); the paper says \"a normalized MLP projector\" (Section 3) and \"the latent vector "+
			"dimension to 128\" (Section 4.1), and no more of it.", trainstep.DefaultProjectionDim),
		"schedule": "cosine annealing of the learning rate to 0 over the run, after the run's warmup_epochs of linear warm-up " +
			"(none unless a run sets it); the paper states \"cosine annealing schedule with SGD optimizer\" for ImageNet " +
			"(Section 4.1), no schedule for CIFAR and STL10, and no warm-up.",
	}
	paper := trainstep.PaperDefaults()
	var cifarStem, constantWeights []string
	defaultMomentum := false
	for _, r := range c.Runs {
		model := fmt.Sprint(r.Setting(trainstep.SettingModel))
		if strings.HasSuffix(model, "-cifar") && !slices.Contains(cifarStem, model) {
			cifarStem = append(cifarStem, model)
		}
		_, given := r.Given(trainstep.SettingMomentum)
		defaultMomentum = defaultMomentum || !given
		if spec, ok := trainstep.LookupLoss(trainstep.LossKind(r.Loss())); ok && spec.HasWeights && r.Setting(trainstep.SettingDCLWGrad) == 0.0 &&
			!slices.Contains(constantWeights, r.Loss()) {
			constantWeights = append(constantWeights, r.Loss())
		}
	}
	if len(cifarStem) > 0 {
		out["model"] = fmt.Sprintf("%s: the CIFAR stem (a 3×3 first convolution with stride 1, no max-pool), which the paper does not "+
			"state: it names the backbone (\"ResNet-18 ... is used as the encoder architecture\", Section 4.1) and no stem.", strings.Join(cifarStem, ", "))
	}
	if defaultMomentum {
		out["momentum"] = fmt.Sprintf("SGD momentum %g (the trainer's default, SimCLR's and MoCo's); the paper states none for "+
			"pretraining (its \"momentum = 0.9\" is the linear probe's, appendix, \"Linear evaluation\").", paper.Momentum)
	}
	if len(constantWeights) > 0 {
		out["loss"] = fmt.Sprintf("%s's weights w_i are constants in the backward pass (dclw_grad: false, no gradient flows through "+
			"them); the paper's formula (L_DCW, Section 3) has no stop-gradient, and common code (lightly's DCLWLoss) backpropagates "+
			"through them, as dclw_grad's default does.", strings.Join(constantWeights, ", "))
	}
	if aug, err := augment.Preset(c.Preprocess.Augment, max(c.Dataset.ImageSize, 32)); err == nil && (aug.BlurP[0] > 0 || aug.BlurP[1] > 0) {
		whose := "SimCLR's"
		if c.Preprocess.Augment == augment.BYOL {
			whose = "BYOL's"
		}
		out["augment"] = fmt.Sprintf("%s: the Gaussian blur's probability (%g, %g per view) and kernel (10%% of the side) are %s; the "+
			"paper's appendix gives the blur's σ range [0.1, 2.0] and neither.", c.Preprocess.Augment, aug.BlurP[0], aug.BlurP[1], whose)
	}
	if l, ok := c.Evaluate.Settings(pipelines.EvalLinear); ok {
		openSelfSup := "OpenSelfSup's protocol, which the paper follows (\"Following the OpenSelfSup benchmark, we first train the linear " +
			"classifier ...\", appendix), trains it on freshly augmented crops (RandomResizedCrop and flip) every epoch"
		passes, epochs := 0, 0
		if ev, found := pipelines.LookupEvaluation(pipelines.EvalLinear); found && ev.Encoder != nil && ev.Encoder.CropPasses != nil {
			passes, epochs = ev.Encoder.CropPasses(l), ev.Encoder.CropPasses(l.With("crop_passes", 0))
		}
		// OpenSelfSup's and MoCo's crops are ImageNet's; the probe takes them at every size.
		cifar := ""
		if c.Dataset.Name == datasets.CIFAR10 || c.Dataset.Name == datasets.CIFAR100 {
			cifar = " On CIFAR these are ImageNet's crops at 32 px: OpenSelfSup's CIFAR-10 configs (configs/classification/cifar10) " +
				"train on RandomCrop 32 with padding 4 and flip, the usual CIFAR transform, which this toolkit does not offer."
		}
		switch {
		case passes == 0:
			out["linear"] = "crops: fixed, the fast probe: the linear classifier trains on fixed features of centre crops, each training " +
				"image embedded once; " + openSelfSup + " (crops: augmented)."
		case passes < epochs:
			out["linear"] = fmt.Sprintf("crops: augmented with %d passes of RandomResizedCrop (scale 0.08–1) and flip for %d epochs: epoch e "+
				"trains on pass e mod %d, so crops repeat; %s.", passes, epochs, passes, openSelfSup) + cifar
		default:
			out["linear"] = "crops: augmented: the classifier trains on a fresh pass of RandomResizedCrop (scale 0.08–1, ratio 3/4–4/3) and " +
				"flip of the train split at the view size every epoch, OpenSelfSup's and MoCo's linear-probe transform on ImageNet; the paper " +
				"states none of it beyond \"Following the OpenSelfSup benchmark\" (appendix)." + cifar
		}
	}
	if c.Dataset.Name == datasets.ImageNet100 {
		out["data"] = "ImageNet-100 is CMC's list of 100 classes (Tian et al.); the paper says only \"a selected subset of 100 " +
			"classes of ImageNet-1K\" (Section 4.1)."
	}
	return out
}

// ToolkitDepartures are the recipe choices of the toolkit's code that apply to this config
// (toolkitDepartures), beside its own Departures.
func (c *Config) ToolkitDepartures() map[string]string { return toolkitDepartures(c) }
