package datasets

import (
	_ "embed"
	"fmt"
	"slices"
	"strings"
)

// Class names as the published archives list them (batches.meta.txt, fine_label_names.txt,
// coarse_label_names.txt, class_names.txt) and as Fashion-MNIST's README names them.
var (
	cifar10Classes = []string{"airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"}

	cifar100Fine = []string{
		"apple", "aquarium_fish", "baby", "bear", "beaver", "bed", "bee", "beetle", "bicycle", "bottle",
		"bowl", "boy", "bridge", "bus", "butterfly", "camel", "can", "castle", "caterpillar", "cattle",
		"chair", "chimpanzee", "clock", "cloud", "cockroach", "couch", "crab", "crocodile", "cup", "dinosaur",
		"dolphin", "elephant", "flatfish", "forest", "fox", "girl", "hamster", "house", "kangaroo", "keyboard",
		"lamp", "lawn_mower", "leopard", "lion", "lizard", "lobster", "man", "maple_tree", "motorcycle", "mountain",
		"mouse", "mushroom", "oak_tree", "orange", "orchid", "otter", "palm_tree", "pear", "pickup_truck", "pine_tree",
		"plain", "plate", "poppy", "porcupine", "possum", "rabbit", "raccoon", "ray", "road", "rocket",
		"rose", "sea", "seal", "shark", "shrew", "skunk", "skyscraper", "snail", "snake", "spider",
		"squirrel", "streetcar", "sunflower", "sweet_pepper", "table", "tank", "telephone", "television", "tiger", "tractor",
		"train", "trout", "tulip", "turtle", "wardrobe", "whale", "willow_tree", "wolf", "woman", "worm",
	}
	cifar100Coarse = []string{
		"aquatic_mammals", "fish", "flowers", "food_containers", "fruit_and_vegetables",
		"household_electrical_devices", "household_furniture", "insects", "large_carnivores",
		"large_man-made_outdoor_things", "large_natural_outdoor_scenes", "large_omnivores_and_herbivores",
		"medium_mammals", "non-insect_invertebrates", "people", "reptiles", "small_mammals", "trees",
		"vehicles_1", "vehicles_2",
	}
	stl10Classes        = []string{"airplane", "bird", "car", "cat", "deer", "dog", "horse", "monkey", "ship", "truck"}
	fashionMNISTClasses = []string{"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"}
)

//go:embed imagenet1k.txt
var imagenet1kText string

//go:embed imagenet100.txt
var imagenet100Text string

// ImageNetSynsets returns the 1,000 ILSVRC-2012 synsets, sorted: a synset's label is its
// index, as torchvision's ImageFolder labels the train folder.
func ImageNetSynsets() []string { return synsetLines(imagenet1kText) }

// ImageNet100Synsets returns the 100 synsets of ImageNet-100 (the CMC list, Tian et al.
// 2019, as solo-learn and the DCL code use it), sorted: labels are indices into this list.
func ImageNet100Synsets() []string {
	s := synsetLines(imagenet100Text)
	slices.Sort(s)
	return s
}

func synsetLines(text string) []string {
	var out []string
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") {
			out = append(out, line)
		}
	}
	return out
}

func numberedClasses(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprint(i)
	}
	return out
}
