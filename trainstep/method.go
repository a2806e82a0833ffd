package trainstep

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	. "github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/ml/model"

	"github.com/dcl-beam/dcl-beam/internal/registry"
)

// Method is a training method: what one training step needs beyond the encoder, its
// optimiser and its checkpoints, which the step owns. SimCLR-style in-batch training
// (InfoNCE, DCL, DCLW and any loss of the loss registry) is the first; methods that keep state
// between steps (a queue of keys, a momentum encoder, a support set) create it as variables of
// the step's store in CreateVariables, so checkpoints save it and a resumed run continues
// bit for bit, without changes to the loop, the checkpoint format or resume.
//
// Adding a method is one file: a type implementing Method and a RegisterMethod call.
type Method interface {
	// Name is the method's name (StepConfig.Method, --method).
	Name() string
	// CreateVariables creates the method's own variables, with their initial values, in a
	// graph that is built once and never run (g.Scope is the store's root). Trainable ones
	// get the optimiser's momentum like the model's; state that is not trained (queues, EMA
	// weights) is created with SetTrainable(false).
	CreateVariables(g *MethodGraph)
	// TrainGraph builds the loss of one batch of view pairs, in training mode. It must not
	// change variables other than through g's encoder (batch-norm running averages): the
	// step's Gradients evaluates it without any update.
	TrainGraph(g *MethodGraph, view1, view2 *Node) TrainNodes
	// AfterUpdate adds what the method does each step once the optimiser has updated the
	// weights (a momentum encoder's EMA, a queue's enqueue), using values TrainGraph kept.
	AfterUpdate(g *MethodGraph, nodes TrainNodes)
}

// ScheduledMethod is a Method with a value that changes over the run (MoCo's cosine EMA
// momentum): before each step the trainer tells it the step's place in the run, as it sets
// the learning rate, and the method sets its variables from it.
type ScheduledMethod interface {
	Method
	// SetProgress sets the method's scheduled values in store for the step that follows
	// step steps of total.
	SetProgress(store *model.Store, step, total int) error
}

// TrainNodes are the graph values a method's TrainGraph returns.
type TrainNodes struct {
	// Loss is the scalar the optimiser minimises.
	Loss *Node
	// Q holds the NPC multiplier of each anchor; nil where the method's loss defines none.
	Q *Node
	// Kept are values AfterUpdate needs (the keys a queue enqueues, say), by name.
	Kept map[string]*Node
}

// MethodGraph is what a method builds its graphs with: the step's model at the step's
// precision, its loss configuration and the store's scope.
type MethodGraph struct {
	// Graph is the graph being built.
	Graph *Graph
	// Scope is the root scope of the step's store.
	Scope *model.Scope
	// Model is the encoder; Encode runs it as the step configures it.
	Model *Model
	// Loss is the step's loss configuration.
	Loss LossConfig
	net  *net
}

// Encode runs the backbone and the projector on uint8 images [B, H, W, C] at the step's
// precision (batch norm in training mode, its running averages updated only in training
// steps) and returns the float32 projections [B, ProjectionDim].
func (g *MethodGraph) Encode(images *Node) *Node {
	return g.Model.project(g.net, g.Scope, g.Model.backbone(g.net, g.Scope, images))
}

// SimCLRMethod is the name of in-batch training: both views of N images as one batch of 2N,
// every view an anchor, the loss of the step's LossConfig (InfoNCE, DCL, DCLW, …).
const SimCLRMethod = "simclr"

type simCLR struct{}

func (simCLR) Name() string                         { return SimCLRMethod }
func (simCLR) CreateVariables(*MethodGraph)         {}
func (simCLR) AfterUpdate(*MethodGraph, TrainNodes) {}

// TrainGraph runs the encoder on both views as one batch, so batch-norm statistics are
// those of the 2N views, and builds the in-batch loss on the stacked projections.
func (simCLR) TrainGraph(g *MethodGraph, view1, view2 *Node) TrainNodes {
	z := g.Encode(Concatenate([]*Node{view1, view2}, 0))
	nodes := StackedLossGraph(z, g.Loss)
	return TrainNodes{Loss: nodes.Loss, Q: nodes.Q}
}

// MethodSpec is everything the toolkit knows about one training method: its name, what
// reports call it, the settings it declares and its constructor. The command line (one flag
// per setting), reproduce's config keys, checkpoints and the docs read this registry, so a
// method with settings of its own is one RegisterMethod call.
type MethodSpec struct {
	// Name is the method's name (StepConfig.Method, --method).
	Name string
	// Display is the name reports print, e.g. "MoCo-v2".
	Display string
	// Params are the settings the method reads (MethodConfig), each with its default and
	// check; a configuration that sets another is refused.
	Params []registry.Param
	// New returns the method of the step's configuration, whose MethodConfig holds every
	// declared setting, checked, defaults filled in.
	New func(StepConfig) (Method, error)
}

// MethodConfig holds the settings of the methods that keep state between steps, by name
// (MethodSpec.Params); one left out takes the method's default. Checkpoints store it, and a
// run resumes only with the same settings.
type MethodConfig map[string]float64

// IsZero says no setting is given (a checkpoint then leaves method_config out).
func (c MethodConfig) IsZero() bool { return len(c) == 0 }

// Int is a whole-number setting's value.
func (c MethodConfig) Int(name string) int { return registry.Values(c).Int(name) }

// Float is a setting's value.
func (c MethodConfig) Float(name string) float64 { return registry.Values(c).Float(name) }

// Bool is a true/false setting's value.
func (c MethodConfig) Bool(name string) bool { return registry.Values(c).Bool(name) }

// MarshalJSON writes the settings in the order the methods declare them, under their JSON
// keys, whole numbers and bools as such.
func (c MethodConfig) MarshalJSON() ([]byte, error) {
	buf, err := registry.AppendJSON([]byte("{"), MethodParams(), registry.Values(c), false)
	if err != nil {
		return nil, err
	}
	if len(buf) > 1 {
		buf = slices.Delete(buf, 1, 2) // the first entry's comma
	}
	return append(buf, '}'), nil
}

// UnmarshalJSON reads settings that registered methods declare; another key is an error.
func (c *MethodConfig) UnmarshalJSON(data []byte) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return err
	}
	*c = MethodConfig{}
	params := MethodParams()
	for _, key := range slices.Sorted(maps.Keys(fields)) {
		p, ok := registry.ByJSONName(params, key)
		if !ok {
			return fmt.Errorf("method_config: unknown setting %q (no registered method declares it)", key)
		}
		v, err := p.DecodeJSON(fields[key])
		if err != nil {
			return fmt.Errorf("method_config: %w", err)
		}
		(*c)[p.Name] = v
	}
	return nil
}

// withDefaults returns c with every setting the method declares, checked, the method's
// default where c leaves one out, or an error naming a setting the method does not read or
// a value out of its range.
func (c MethodConfig) withDefaults(spec MethodSpec) (MethodConfig, error) {
	v, err := registry.Resolve("method "+spec.Name, spec.Params, registry.Values(c), true)
	return MethodConfig(v), err
}

var methodRegistry = registry.New[MethodSpec]("training method")

// RegisterMethod adds a training method. It panics when the name is taken or the spec is
// incomplete (programming errors, found when the binary starts).
func RegisterMethod(spec MethodSpec) {
	if spec.Display == "" || spec.New == nil {
		panic(fmt.Sprintf("trainstep.RegisterMethod: %q has no display name or constructor", spec.Name))
	}
	methodRegistry.Register(spec.Name, spec)
	registry.Merge(MethodVariants())
}

// UnregisterMethod removes a method: for tests that register one for their own duration.
func UnregisterMethod(name string) { methodRegistry.Unregister(name) }

// MethodNames returns the registered training methods, sorted.
func MethodNames() []string { return slices.Sorted(slices.Values(methodRegistry.Names())) }

// MethodVariants are the methods' names and declared settings (sorted by name), which the
// command line's flags and reproduce's keys are derived from.
func MethodVariants() []registry.Variant {
	var out []registry.Variant
	for _, name := range MethodNames() {
		spec, _ := methodRegistry.Lookup(name)
		out = append(out, registry.Variant{Name: spec.Name, Params: spec.Params})
	}
	return out
}

// MethodParams are the settings any method declares, one per name.
func MethodParams() []registry.Param { return registry.Merge(MethodVariants()) }

// LookupMethod returns the spec of a method by name ("" is SimCLRMethod).
func LookupMethod(name string) (MethodSpec, error) {
	name = methodName(name)
	spec, ok := methodRegistry.Lookup(name)
	if !ok {
		return MethodSpec{}, fmt.Errorf("unknown training method %q: want one of %s", name, strings.Join(MethodNames(), ", "))
	}
	return spec, nil
}

// withMethodDefaults returns cfg with its method named ("" is SimCLRMethod) and the
// method's defaults filled in.
func (c StepConfig) withMethodDefaults() (StepConfig, error) {
	spec, err := LookupMethod(c.Method)
	if err != nil {
		return c, err
	}
	c.Method = spec.Name
	if c.MethodConfig, err = c.MethodConfig.withDefaults(spec); err != nil {
		return c, err
	}
	return c, nil
}

// newMethod returns the method of cfg, whose method defaults are filled in.
func newMethod(cfg StepConfig) (Method, error) {
	spec, err := LookupMethod(cfg.Method)
	if err != nil {
		return nil, err
	}
	return spec.New(cfg)
}

// methodName is the method a configuration or checkpoint names: one from before methods
// existed trained in-batch.
func methodName(name string) string {
	if name == "" {
		return SimCLRMethod
	}
	return name
}

func init() {
	RegisterMethod(MethodSpec{Name: SimCLRMethod, Display: "SimCLR",
		New: func(StepConfig) (Method, error) { return simCLR{}, nil }})
}
