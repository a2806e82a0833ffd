package trainstep

import (
	"fmt"
	"math/rand/v2"
	"slices"
)

// Sample keeps n of the images drawn uniformly without replacement by a generator seeded
// with (seed, stream), in their order in l; l itself when it has no more than n. The same
// arguments draw the same images, whatever else the caller samples.
func (l *LabeledImages) Sample(n int, seed, stream uint64) *LabeledImages {
	if l.N <= n {
		return l
	}
	r := rand.New(rand.NewPCG(seed, stream))
	keep := r.Perm(l.N)[:n]
	slices.Sort(keep)
	size := l.H * l.W * l.C
	out := &LabeledImages{Source: fmt.Sprintf("%s (%d of %d images, seed %d)", l.Source, n, l.N, seed),
		H: l.H, W: l.W, C: l.C, N: n, Images: make([]uint8, 0, n*size), Labels: make([]int32, 0, n)}
	for _, i := range keep {
		out.Images = append(out.Images, l.Images[i*size:(i+1)*size]...)
		out.Labels = append(out.Labels, l.Labels[i])
	}
	return out
}
