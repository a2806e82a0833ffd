package trainstep

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	. "github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/ml/model"
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
// reports call it, the settings it reads and their defaults, and its constructor. The
// command line, reproduce's configs and the docs read this registry.
type MethodSpec struct {
	// Name is the method's name (StepConfig.Method, --method).
	Name string
	// Display is the name reports print, e.g. "MoCo-v2".
	Display string
	// Settings are the MethodConfig fields the method reads, by their JSON names; a
	// configuration that sets another is refused.
	Settings []string
	// Defaults are the values of Settings where a configuration leaves them zero.
	Defaults MethodConfig
	// New checks the step's configuration (with the defaults filled in) and returns the
	// method.
	New func(StepConfig) (Method, error)
}

// MethodConfig holds the settings of the methods that keep state between steps; zero
// values take the method's defaults (MethodSpec.Defaults). Checkpoints store it, and a run
// resumes only with the same settings.
type MethodConfig struct {
	// QueueSize is MoCo's queue of negative keys K, or NNCLR's support set.
	QueueSize int `json:"queue_size,omitempty"`
	// MomentumEMA is MoCo's key-encoder momentum m: key ← m·key + (1-m)·query after each
	// step.
	MomentumEMA float64 `json:"momentum_ema,omitempty"`
	// Symmetric makes MoCo use both views as queries (each against the other's key), and
	// enqueue both keys.
	Symmetric bool `json:"symmetric,omitempty"`
	// BNSplits is the number of groups MoCo's batch norm takes its statistics over, keys
	// regrouped so each key's group mixes every query group (single-device shuffle BN).
	BNSplits int `json:"bn_splits,omitempty"`
	// PredictorHidden is the hidden width of NNCLR's prediction head.
	PredictorHidden int `json:"predictor_hidden,omitempty"`
}

// methodSettings lists MethodConfig's fields by JSON name, with whether c sets each and a
// pointer to fill a default in.
func (c *MethodConfig) settings() []struct {
	name  string
	isSet bool
	fill  func(MethodConfig)
} {
	type setting = struct {
		name  string
		isSet bool
		fill  func(MethodConfig)
	}
	return []setting{
		{"queue_size", c.QueueSize != 0, func(d MethodConfig) { c.QueueSize = d.QueueSize }},
		{"momentum_ema", c.MomentumEMA != 0, func(d MethodConfig) { c.MomentumEMA = d.MomentumEMA }},
		{"symmetric", c.Symmetric, func(d MethodConfig) { c.Symmetric = d.Symmetric }},
		{"bn_splits", c.BNSplits != 0, func(d MethodConfig) { c.BNSplits = d.BNSplits }},
		{"predictor_hidden", c.PredictorHidden != 0, func(d MethodConfig) { c.PredictorHidden = d.PredictorHidden }},
	}
}

// withDefaults returns c with the method's defaults where c leaves a setting zero, or an
// error naming a setting the method does not read.
func (c MethodConfig) withDefaults(spec MethodSpec) (MethodConfig, error) {
	for _, s := range c.settings() {
		uses := slices.Contains(spec.Settings, s.name)
		switch {
		case s.isSet && !uses:
			return c, fmt.Errorf("method %s has no setting %s (it reads %s)", spec.Name, s.name, settingList(spec.Settings))
		case !s.isSet && uses:
			s.fill(spec.Defaults)
		}
	}
	return c, nil
}

func settingList(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

var methodRegistry = struct {
	sync.RWMutex
	byName map[string]MethodSpec
}{byName: map[string]MethodSpec{}}

// RegisterMethod adds a training method. It panics when the name is taken or the spec is
// incomplete (programming errors, found when the binary starts).
func RegisterMethod(spec MethodSpec) {
	methodRegistry.Lock()
	defer methodRegistry.Unlock()
	if _, taken := methodRegistry.byName[spec.Name]; taken || spec.Name == "" || spec.Display == "" || spec.New == nil {
		panic(fmt.Sprintf("trainstep.RegisterMethod: %q is taken, or has no display name or constructor", spec.Name))
	}
	methodRegistry.byName[spec.Name] = spec
}

// MethodNames returns the registered training methods, sorted.
func MethodNames() []string {
	methodRegistry.RLock()
	defer methodRegistry.RUnlock()
	names := make([]string, 0, len(methodRegistry.byName))
	for n := range methodRegistry.byName {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// LookupMethod returns the spec of a method by name ("" is SimCLRMethod).
func LookupMethod(name string) (MethodSpec, error) {
	name = methodName(name)
	methodRegistry.RLock()
	spec, ok := methodRegistry.byName[name]
	methodRegistry.RUnlock()
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
