package trainstep

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/transforms"
)

func TestEncoderEmbedsLikeTheTrainedStep(t *testing.T) {
	pairs := syntheticPairs(5, 12, 3, 6, 6, 3)
	out := t.TempDir()
	sum, err := Train(context.Background(), testStepConfig(MLP), testRunConfig(t, out), quietOptions(t, mustMemorySource(t, pairs)))
	if err != nil {
		t.Fatal(err)
	}
	backend := newTestBackend(t)
	enc, err := LoadEncoder(context.Background(), backend, out) // the folder: its newest checkpoint
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	info := enc.Info()
	if info.Checkpoint != sum.Checkpoint || info.Model.Name != MLP || info.FeatureDim != 16 || info.ProjectionDim != 128 || info.ImageHeight != 6 {
		t.Errorf("info = %+v", info)
	}

	// The reference: a Step restored from the same checkpoint.
	s, err := NewStep(backend, testStepConfig(MLP), 6, 6)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Finalize()
	ckpt, err := ReadCheckpoint(context.Background(), sum.Checkpoint)
	if err != nil {
		t.Fatal(err)
	}
	if err := ckpt.Restore(s); err == nil {
		t.Fatalf("restoring a 3-channel checkpoint into a 1-channel model gave no error")
	}
	cfg := testStepConfig(MLP)
	cfg.Model.Channels = 3
	cfg.Model.Dataset = info.Model.Dataset // the checkpoint's normalisation
	s3, err := NewStep(backend, cfg, 6, 6)
	if err != nil {
		t.Fatal(err)
	}
	defer s3.Finalize()
	if err := ckpt.Restore(s3); err != nil {
		t.Fatal(err)
	}
	images := make([]transforms.Image, 5)
	var flat []uint8
	for i := range images {
		images[i] = pairs[i].View1
		flat = append(flat, images[i].Pix...)
	}
	wantFeat, wantProj, err := s3.Features(flat, 5, 6, 6, 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		feature Feature
		want    [][]float32
	}{{Backbone, wantFeat}, {Projection, wantProj}} {
		got, err := enc.Embed(images, tc.feature)
		if err != nil {
			t.Fatal(err)
		}
		one, err := enc.Embed(images[2:3], tc.feature) // padded differently
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 5 || len(got[0]) != len(tc.want[0]) {
			t.Fatalf("%s: got %d×%d, want %d×%d", tc.feature, len(got), len(got[0]), len(tc.want), len(tc.want[0]))
		}
		for i := range got {
			for j := range got[i] {
				if math.Abs(float64(got[i][j]-tc.want[i][j])) > 1e-5 {
					t.Fatalf("%s[%d][%d] = %v, the step gives %v", tc.feature, i, j, got[i][j], tc.want[i][j])
				}
			}
		}
		for j := range one[0] {
			if math.Abs(float64(one[0][j]-got[2][j])) > 1e-5 {
				t.Fatalf("%s of image 2 alone differs from in a batch: %v vs %v", tc.feature, one[0][j], got[2][j])
			}
		}
	}
}

func TestEncoderRejectsBadInput(t *testing.T) {
	pairs := syntheticPairs(6, 8, 2, 6, 6, 1)
	out := t.TempDir()
	if _, err := Train(context.Background(), testStepConfig(MLP), testRunConfig(t, out), quietOptions(t, mustMemorySource(t, pairs))); err != nil {
		t.Fatal(err)
	}
	backend := newTestBackend(t)
	if _, err := LoadEncoder(context.Background(), backend, t.TempDir()); err == nil || !strings.Contains(err.Error(), "no checkpoint in") {
		t.Errorf("loading from an empty folder: %v", err)
	}
	enc, err := LoadEncoder(context.Background(), backend, out)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	gray := transforms.NewImage(6, 6, 1)
	for _, tc := range []struct {
		name    string
		images  []transforms.Image
		feature Feature
		want    string
	}{
		{"rgb into a grayscale model", []transforms.Image{transforms.NewImage(6, 6, 3)}, Backbone, "3 channels"},
		{"mixed sizes", []transforms.Image{gray, transforms.NewImage(7, 6, 1)}, Backbone, "image 1 is 7x6x1"},
		{"broken image", []transforms.Image{{Pix: make([]uint8, 3), H: 6, W: 6, C: 1}}, Backbone, "image 0"},
		{"unknown feature", []transforms.Image{gray}, "logits", `feature "logits"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := enc.Embed(tc.images, tc.feature)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}
