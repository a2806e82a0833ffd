package datasets

import (
	"bytes"
	"context"
	"fmt"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/dcl-beam/dcl-beam/internal/storage"
)

func init() {
	RegisterKind(KindTar, Kind{Read: readTarUnit, Fetch: fetchTar})
	splits := []string{"train", "val"}
	const input = "the dataset root (holding train/ or " + trainTar + ", and val/; or Kaggle's ILSVRC/Data/CLS-LOC/{train,val}), " +
		"or one split's own input: the train folder (synset subfolders), a folder of per-class n*.tar files, a glob of them, " +
		"or the outer " + trainTar + "; the val folder (synset subfolders, or a flat folder of images with a labels file, Spec.LabelsFile)"
	Register(Descriptor{
		Name: ImageNet, Summary: "ILSVRC-2012 (its root, or the train folder or tars, the val folder with its labels file)",
		Input:  input,
		Splits: splits, Classes: func(bool) []string { return ImageNetSynsets() },
		Published: map[string]int64{"train": 1281167, "val": 50000},
		ViewSize:  224, Channels: 3, Mean: imagenetMean, Std: imagenetStd,
		Augment: "simclr-imagenet", SplitPlaces: imagenetPlaces, Plan: planImageNet,
	})
	Register(Descriptor{
		Name: ImageNet100, Summary: "the 100-class ImageNet subset of CMC (Tian et al. 2019), read from ILSVRC-2012",
		Input:  input,
		Splits: splits, Classes: func(bool) []string { return ImageNet100Synsets() },
		Published: map[string]int64{"train": 126689, "val": 5000}, // CMC's 100 classes of ILSVRC-2012
		ViewSize:  224, Channels: 3, Mean: imagenetMean, Std: imagenetStd,
		Augment: "simclr-imagenet", SplitPlaces: imagenetPlaces, Plan: planImageNet,
	})
}

// trainTar is the published train archive, read in place.
const trainTar = "ILSVRC2012_img_train.tar"

// imagenetPlaces are where the splits lie under an ILSVRC-2012 root: the folders the
// archives are usually extracted into, the train archive itself, and Kaggle's layout
// (ILSVRC/Data/CLS-LOC/{train,val} with LOC_val_solution.csv at the root).
func imagenetPlaces(split string) []string {
	switch split {
	case "train":
		return []string{"train", trainTar, "ILSVRC/Data/CLS-LOC/train"}
	case "val":
		return []string{"val", "ILSVRC/Data/CLS-LOC/val"}
	}
	return nil
}

// trainOnly refuses the train split's archive layouts for another split: the tars hold the
// training images only.
func trainOnly(s Spec, layout string) error {
	if s.Split == "train" {
		return nil
	}
	return fmt.Errorf("%s %s: %s is %s, the train split's layout, which the %s split must not read: give the dataset root, or the %s folder (flat with %s, or synset folders)",
		s.Dataset, s.Split, s.Input, layout, s.Split, s.Split, valLabelsFile)
}

var synsetPattern = regexp.MustCompile(`^n[0-9]{8}$`)

// valLabelsFile is the name of Kaggle's ImageNet validation labels, looked for when
// Spec.LabelsFile is empty.
const valLabelsFile = "LOC_val_solution.csv"

// imagenetClasses returns the classes of imagenet or imagenet100 with their labels, and the
// 1,000 synsets for telling unknown folders from classes outside the subset.
func imagenetClasses(dataset string) (classes []string, label map[string]int, all map[string]bool) {
	synsets := ImageNetSynsets()
	all = make(map[string]bool, len(synsets))
	for _, s := range synsets {
		all[s] = true
	}
	classes = synsets
	if dataset == ImageNet100 {
		classes = ImageNet100Synsets()
	}
	label = make(map[string]int, len(classes))
	for i, c := range classes {
		label[c] = i
	}
	return classes, label, all
}

// missingError names the classes of the dataset an input lacks.
func missingError(what, input string, classes []string, have func(string) bool) error {
	var missing []string
	for _, c := range classes {
		if !have(c) {
			missing = append(missing, c)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("%s: %s lacks %d of the %d classes: %s", what, input, len(missing), len(classes), abbreviate(missing, 5))
}

func abbreviate(items []string, n int) string {
	if len(items) <= n {
		return strings.Join(items, ", ")
	}
	return strings.Join(items[:n], ", ") + fmt.Sprintf(" and %d more", len(items)-n)
}

func planImageNet(ctx context.Context, s Spec) (Plan, error) {
	what := s.Dataset + " " + s.Split
	classes, label, known := imagenetClasses(s.Dataset)
	p := Plan{Classes: classes}
	if hasGlob(s.Input) {
		if err := trainOnly(s, "a glob of per-class tars"); err != nil {
			return Plan{}, err
		}
		tars, err := listGlob(ctx, s.Input)
		if err != nil {
			return Plan{}, fmt.Errorf("%s: %w", what, err)
		}
		return p, planClassTars(ctx, &p, s, tars, label, known)
	}
	if strings.HasSuffix(s.Input, ".tar") {
		if err := trainOnly(s, "a tar of per-class tars"); err != nil {
			return Plan{}, err
		}
		return p, planOuterTar(ctx, &p, s, label, known)
	}

	var ignored []string
	l, err := listClasses(ctx, s.Input, func(rel string) { ignored = append(ignored, rel) })
	if err != nil {
		return Plan{}, fmt.Errorf("%s: %w", what, err)
	}
	var tars, flat []string
	for _, rel := range ignored {
		switch {
		case strings.Contains(rel, "/"):
			p.ignore(rel)
		case strings.HasSuffix(rel, ".tar"):
			tars = append(tars, joinPath(s.Input, rel))
		case isImageName(rel):
			flat = append(flat, rel)
		default:
			p.ignore(rel)
		}
	}
	layouts := 0
	for _, n := range []int{len(l.classes), len(tars), len(flat)} {
		if n > 0 {
			layouts++
		}
	}
	switch {
	case layouts > 1:
		return Plan{}, fmt.Errorf("%s: %s mixes %d class folders, %d .tar files and %d images at its top: point the input at one layout",
			what, s.Input, len(l.classes), len(tars), len(flat))
	case len(tars) > 0:
		if err := trainOnly(s, "a folder of per-class tars"); err != nil {
			return Plan{}, err
		}
		return p, planClassTars(ctx, &p, s, tars, label, known)
	case len(flat) > 0:
		if s.Split == "train" {
			return Plan{}, fmt.Errorf("%s: %s holds images at its top, not synset folders", what, s.Input)
		}
		return p, planFlatVal(ctx, &p, s, flat, label)
	}

	var unknown []string
	for _, c := range l.classes {
		if !known[c] {
			unknown = append(unknown, c)
		}
	}
	if len(unknown) > 0 {
		return Plan{}, fmt.Errorf("%s: %s has folders that are not ILSVRC-2012 synsets: %s", what, s.Input, abbreviate(unknown, 5))
	}
	if err := missingError(what, s.Input, classes, func(c string) bool { _, ok := l.files[c]; return ok }); err != nil {
		return Plan{}, err
	}
	var empty []string
	for _, c := range classes {
		if len(l.files[c]) == 0 {
			empty = append(empty, c)
		}
	}
	if len(empty) > 0 {
		return Plan{}, fmt.Errorf("%s: %s: synset folders without a JPEG or PNG file: %s", what, s.Input, abbreviate(empty, 5))
	}
	var index int64
	for i, c := range classes {
		classUnits(&p, s, c, i, int64(len(l.files[c])), &index)
	}
	return p, nil
}

// planClassTars plans the published per-class train tars (SYNSET.tar), one unit each.
func planClassTars(ctx context.Context, p *Plan, s Spec, tars []string, label map[string]int, known map[string]bool) error {
	what := s.Dataset + " " + s.Split
	bySynset := map[string]string{}
	var unknown []string
	for _, t := range tars {
		syn := strings.TrimSuffix(storage.Base(t), ".tar")
		if !known[syn] {
			unknown = append(unknown, storage.Base(t))
			continue
		}
		bySynset[syn] = t
	}
	if len(unknown) > 0 {
		return fmt.Errorf("%s: tars not named after an ILSVRC-2012 synset: %s", what, abbreviate(unknown, 5))
	}
	if err := missingError(what, s.Input, p.Classes, func(c string) bool { return bySynset[c] != "" }); err != nil {
		return err
	}
	sizes := make([]int64, len(p.Classes))
	errs := make([]error, len(p.Classes))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16) // sizes on gs:// are one request each
	for i, c := range p.Classes {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			sizes[i], errs[i] = storage.Size(ctx, bySynset[c])
		})
	}
	wg.Wait()
	var index int64
	for i, c := range p.Classes {
		if errs[i] != nil {
			return errs[i]
		}
		p.Units = append(p.Units, tarUnit(s, bySynset[c], "", 0, sizes[i], c, label[c], index))
		index += tarIndexSpan(sizes[i])
	}
	return nil
}

func tarUnit(s Spec, p, member string, off, n int64, synset string, label int, index int64) Unit {
	return Unit{
		Kind: KindTar, Split: s.Split, Path: p, Member: member, Offset: off, Length: n,
		KeyDir: synset, Label: label, Index: index, Records: max(1, n/imagenetMeanBytes),
	}
}

// planOuterTar plans ILSVRC2012_img_train.tar: a tar of the per-class tars, one unit each,
// read in place.
func planOuterTar(ctx context.Context, p *Plan, s Spec, label map[string]int, known map[string]bool) error {
	what := s.Dataset + " " + s.Split
	members, err := scanOuterTar(ctx, s.Input, p.ignore)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	bySynset := map[string]tarMember{}
	var unknown []string
	for _, m := range members {
		syn := strings.TrimSuffix(path.Base(m.name), ".tar")
		if !known[syn] {
			unknown = append(unknown, m.name)
			continue
		}
		if _, dup := bySynset[syn]; dup {
			return fmt.Errorf("%s: tar %s holds %s twice", what, s.Input, m.name)
		}
		bySynset[syn] = m
	}
	if len(unknown) > 0 {
		return fmt.Errorf("%s: tar %s holds tars not named after an ILSVRC-2012 synset: %s", what, s.Input, abbreviate(unknown, 5))
	}
	if err := missingError(what, s.Input, p.Classes, func(c string) bool { _, ok := bySynset[c]; return ok }); err != nil {
		return err
	}
	var index int64
	for _, c := range p.Classes {
		m := bySynset[c]
		p.Units = append(p.Units, tarUnit(s, s.Input, m.name, m.offset, m.length, c, label[c], index))
		index += tarIndexSpan(m.length)
	}
	return nil
}

// planFlatVal plans a flat validation folder labelled by a labels file: file-list units.
// Files the labels file does not mention stay in the units as bad records (NoLabel); files
// of classes outside the dataset (ImageNet-100) are not part of it.
func planFlatVal(ctx context.Context, p *Plan, s Spec, images []string, label map[string]int) error {
	what := s.Dataset + " " + s.Split
	labelsPath, err := findValLabels(ctx, s)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	data, err := readSmall(ctx, labelsPath, 256<<20)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	synsetOf, err := ParseValLabels(labelsPath, data)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	present := map[string]bool{}
	var files []string
	var labels []int
	for _, f := range images {
		stem := imageStem(f)
		present[stem] = true
		syn, ok := synsetOf[stem]
		if !ok {
			files, labels = append(files, f), append(labels, NoLabel)
			continue
		}
		if l, in := label[syn]; in {
			files, labels = append(files, f), append(labels, l)
		}
	}
	var missing []string
	for stem, syn := range synsetOf {
		if _, in := label[syn]; in && !present[stem] {
			missing = append(missing, stem)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return fmt.Errorf("%s: %s labels %d images of the dataset that %s lacks: %s", what, labelsPath, len(missing), s.Input, abbreviate(missing, 5))
	}
	n := int64(len(files))
	chunks(n, int64(s.UnitRecords), func(first, count int64) {
		p.Units = append(p.Units, Unit{
			Kind: KindFiles, Split: s.Split, Path: s.Input, LabelsPath: labelsPath, First: first, Records: count,
			Exact: true, Index: first, Files: files[first : first+count], Labels: labels[first : first+count],
		})
	})
	return nil
}

// imageStem is a file's name without folder or extension: how labels files name images.
func imageStem(name string) string {
	base := path.Base(strings.ReplaceAll(name, "\\", "/"))
	return strings.TrimSuffix(base, path.Ext(base))
}

func parentOf(p string) string {
	if storage.Scheme(p) == "" {
		return filepath.Dir(filepath.Clean(p))
	}
	scheme, rest, _ := strings.Cut(strings.TrimSuffix(p, "/"), "://")
	return scheme + "://" + path.Dir(rest)
}

func findValLabels(ctx context.Context, s Spec) (string, error) {
	if s.LabelsFile != "" {
		return s.LabelsFile, nil
	}
	tried := []string{storage.Join(s.Input, valLabelsFile), storage.Join(parentOf(s.Input), valLabelsFile)}
	if s.root != "" && !slices.Contains(tried, storage.Join(s.root, valLabelsFile)) {
		tried = append(tried, storage.Join(s.root, valLabelsFile)) // Kaggle's layout keeps it at the root
	}
	for _, p := range tried {
		ok, err := storage.Exists(ctx, p)
		if err != nil {
			return "", err
		}
		if ok {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s is a flat folder of images and needs a labels file: none given and no %s", s.Input, strings.Join(tried, " or "))
}

// ParseValLabels reads a labels file for a flat ImageNet validation folder and returns the
// synset of each image, keyed by the image's name without folder or extension
// ("ILSVRC2012_val_00000001"). name is only used in errors. Two formats are accepted:
//
//   - Kaggle's LOC_val_solution.csv: a header line "ImageId,PredictionString", then one line
//     per image, "ILSVRC2012_val_00008726,n02119789 255 142 454 329 n02119789 44 21 322 295":
//     the image's class is the synset of its boxes (they must all agree).
//   - Plain text: one "FILENAME LABEL" line per image, separated by spaces or tabs, where
//     FILENAME may carry a folder and an extension and LABEL is a synset (n01440764) or an
//     integer 0-999, the synset's index in the sorted list (ImageNetSynsets), as in Caffe's
//     val.txt. Blank lines and lines starting with # are skipped.
//
// The devkit's ILSVRC2012_validation_ground_truth.txt is not accepted: it names no files and
// numbers classes in the devkit's own order (meta.mat); convert it to FILENAME SYNSET lines.
// An unknown synset, an integer out of range, a malformed line or an image labelled twice
// with different classes is an error naming the file and line.
func ParseValLabels(name string, data []byte) (map[string]string, error) {
	synsets := ImageNetSynsets()
	known := make(map[string]bool, len(synsets))
	for _, s := range synsets {
		known[s] = true
	}
	out := map[string]string{}
	set := func(line int, file, syn string) error {
		if !known[syn] {
			return fmt.Errorf("%s line %d: %q is not an ILSVRC-2012 synset", name, line, syn)
		}
		stem := imageStem(file)
		if prev, ok := out[stem]; ok && prev != syn {
			return fmt.Errorf("%s line %d: %s labelled %s here and %s before", name, line, stem, syn, prev)
		}
		out[stem] = syn
		return nil
	}
	text := string(bytes.TrimPrefix(data, []byte("\ufeff")))
	lineNo := 0
	csv := false
	for line := range strings.Lines(text) {
		lineNo++
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if lineNo == 1 && strings.HasPrefix(line, "ImageId,") {
			csv = true
			continue
		}
		if csv {
			id, boxes, ok := strings.Cut(line, ",")
			fields := strings.Fields(boxes)
			if !ok || id == "" || len(fields) == 0 {
				return nil, fmt.Errorf("%s line %d: want ImageId,PredictionString, got %q", name, lineNo, line)
			}
			syn := fields[0]
			for i := 5; i < len(fields); i += 5 {
				if fields[i] != syn {
					return nil, fmt.Errorf("%s line %d: %s has boxes of %s and %s", name, lineNo, id, syn, fields[i])
				}
			}
			if err := set(lineNo, id, syn); err != nil {
				return nil, err
			}
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 {
			return nil, fmt.Errorf("%s line %d: want FILENAME LABEL, got %q", name, lineNo, line)
		}
		syn := fields[1]
		if !synsetPattern.MatchString(syn) {
			i, err := strconv.Atoi(syn)
			if err != nil || i < 0 || i >= len(synsets) {
				return nil, fmt.Errorf("%s line %d: label %q is neither a synset nor an integer 0..%d", name, lineNo, syn, len(synsets)-1)
			}
			syn = synsets[i]
		}
		if err := set(lineNo, fields[0], syn); err != nil {
			return nil, err
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s labels no images", name)
	}
	return out, nil
}
