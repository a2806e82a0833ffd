package trainstep

import (
	"context"
	"fmt"

	"go.yaml.in/yaml/v3"

	"github.com/dcl-beam/dcl-beam/internal/registry"
	"github.com/dcl-beam/dcl-beam/internal/storage"
)

// SettingsName is the file of a run folder that lists every setting of its training, as a
// config's run keys (train.defaults) take them: the run's hyper-parameters in one place a
// reader of the folder finds without opening a checkpoint.
const SettingsName = "settings.yaml"

// SettingsYAML lists every setting of t (TrainSettings, then the parameters of its loss and
// its method, each with its default where t leaves it out) as YAML, in declaration order; the
// settings a config cannot give (the command line's) follow, commented out.
func SettingsYAML(t ShardTraining) ([]byte, error) {
	doc := &yaml.Node{Kind: yaml.MappingNode}
	var commandOnly []string
	add := func(p registry.Param, v any) {
		text := formatSetting(p, v)
		if p.Surface == registry.CommandOnly {
			commandOnly = append(commandOnly, fmt.Sprintf("%s: %s", p.Name, text))
			return
		}
		doc.Content = append(doc.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: p.Name},
			&yaml.Node{Kind: yaml.ScalarNode, Value: text, Style: scalarStyle(text)})
	}
	for _, s := range TrainSettings() {
		add(s.Param, s.Get(&t))
	}
	if spec, ok := LookupLoss(t.Step.Loss.Kind); ok {
		for _, p := range spec.Params {
			v, given := t.Step.Loss.Params[p.Name]
			if !given {
				v = p.Default
			}
			add(p, v)
		}
	}
	if spec, err := LookupMethod(t.Step.Method); err == nil {
		for _, p := range spec.Params {
			v, given := t.Step.MethodConfig[p.Name]
			if !given {
				v = p.Default
			}
			add(p, v)
		}
	}
	body, err := yaml.Marshal(doc)
	if err != nil {
		return nil, err
	}
	out := []byte("# The settings of this training run, as a config's train.defaults takes them (docs/configs.md).\n")
	out = append(out, body...)
	if len(commandOnly) > 0 {
		out = append(out, "# Settings of the command line only (dcl train):\n"...)
		for _, l := range commandOnly {
			out = append(out, "#   "+l+"\n"...)
		}
	}
	return out, nil
}

// formatSetting writes a setting's value as a config gives it.
func formatSetting(p registry.Param, v any) string {
	if p.Value == nil {
		f, err := asFloat(v)
		if err != nil {
			return fmt.Sprint(v)
		}
		return p.Format(f)
	}
	return fmt.Sprint(v)
}

// scalarStyle quotes a value YAML would read as another kind or as nothing.
func scalarStyle(text string) yaml.Style {
	if text == "" {
		return yaml.DoubleQuotedStyle
	}
	return 0
}

// writeSettingsFile writes the run folder's SettingsName.
func writeSettingsFile(ctx context.Context, t ShardTraining) error {
	data, err := SettingsYAML(t)
	if err != nil {
		return err
	}
	return storage.WriteFile(ctx, storage.Join(t.Run.Out, SettingsName), data)
}
