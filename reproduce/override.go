package reproduce

import (
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Override is one KEY=VALUE of `dcl reproduce --set`: the config's key at a dotted path
// (train.defaults.epochs, evaluate.knn.k, train.runs.0.loss for the first run) given the
// value VALUE, read as YAML reads a value (3, 0.5, dcl, [1, 2], {k: 20}).
type Override struct {
	Path  []string
	Value yaml.Node
	text  string
}

func (o Override) String() string { return o.text }

// ParseOverride reads KEY=VALUE.
func ParseOverride(s string) (Override, error) {
	key, value, ok := strings.Cut(s, "=")
	key = strings.TrimSpace(key)
	if !ok || key == "" {
		return Override{}, fmt.Errorf("--set %q: want KEY=VALUE, KEY a config key's dotted path (train.defaults.epochs=3)", s)
	}
	path := strings.Split(key, ".")
	for _, p := range path {
		if p == "" {
			return Override{}, fmt.Errorf("--set %q: the key %q has an empty part", s, key)
		}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(value), &doc); err != nil {
		return Override{}, fmt.Errorf("--set %q: the value is not YAML: %w", s, err)
	}
	o := Override{Path: path, text: key + "=" + value}
	if len(doc.Content) == 1 {
		o.Value = *doc.Content[0]
	} else {
		o.Value = yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: ""}
	}
	return o, nil
}

// applyOverrides sets each override's key in the YAML document data, adding the key (and the
// sections above it) where the config does not give it, and returns the document: the config
// is then read from it as from the file, every key and value checked as there.
func applyOverrides(data []byte, overrides []Override) ([]byte, error) {
	if len(overrides) == 0 {
		return data, nil
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	if len(doc.Content) == 0 {
		doc = yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{{Kind: yaml.MappingNode}}}
	}
	for _, o := range overrides {
		if err := setPath(doc.Content[0], o.Path, o.Value, o.text); err != nil {
			return nil, err
		}
	}
	return yaml.Marshal(&doc)
}

// setPath sets the node at path under n to value.
func setPath(n *yaml.Node, path []string, value yaml.Node, text string) error {
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	key := path[0]
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value != key {
				continue
			}
			if len(path) == 1 {
				v := value
				n.Content[i+1] = &v
				return nil
			}
			return setPath(n.Content[i+1], path[1:], value, text)
		}
		child := &yaml.Node{Kind: yaml.MappingNode}
		if len(path) == 1 {
			v := value
			child = &v
		}
		n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, child)
		if len(path) == 1 {
			return nil
		}
		return setPath(child, path[1:], value, text)
	case yaml.SequenceNode:
		i, err := strconv.Atoi(key)
		if err != nil || i < 0 || i >= len(n.Content) {
			return fmt.Errorf("--set %s: %q is not an item of a list of %d (0 to %d)", text, key, len(n.Content), len(n.Content)-1)
		}
		if len(path) == 1 {
			v := value
			n.Content[i] = &v
			return nil
		}
		return setPath(n.Content[i], path[1:], value, text)
	case yaml.ScalarNode:
		if n.Tag == "!!null" { // an empty section (knn:)
			*n = yaml.Node{Kind: yaml.MappingNode}
			return setPath(n, path, value, text)
		}
	}
	return fmt.Errorf("--set %s: %q is under a value, not a section or a list", text, key)
}
