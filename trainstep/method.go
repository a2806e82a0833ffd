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

var methodRegistry = struct {
	sync.RWMutex
	byName map[string]func(StepConfig) (Method, error)
}{byName: map[string]func(StepConfig) (Method, error){}}

// RegisterMethod adds a training method: newMethod checks the step's configuration (the
// method's own settings included) and returns the method. It panics when the name is taken.
func RegisterMethod(name string, newMethod func(StepConfig) (Method, error)) {
	methodRegistry.Lock()
	defer methodRegistry.Unlock()
	if _, taken := methodRegistry.byName[name]; taken || name == "" || newMethod == nil {
		panic(fmt.Sprintf("trainstep.RegisterMethod: %q is taken, empty or has no constructor", name))
	}
	methodRegistry.byName[name] = newMethod
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

// newMethod returns the method of cfg ("" is SimCLRMethod).
func newMethod(cfg StepConfig) (Method, error) {
	name := methodName(cfg.Method)
	methodRegistry.RLock()
	newFn, ok := methodRegistry.byName[name]
	methodRegistry.RUnlock()
	if !ok {
		return nil, fmt.Errorf("unknown training method %q: want one of %s", name, strings.Join(MethodNames(), ", "))
	}
	return newFn(cfg)
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
	RegisterMethod(SimCLRMethod, func(StepConfig) (Method, error) { return simCLR{}, nil })
}
