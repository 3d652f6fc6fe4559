package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/jnf/hf/hftest"
	"github.com/tarfa-ai/tarfa/verify"
)

// TestInspectFP8 runs a block-FP8 checkpoint through inspect, convert
// --verify, verify, manifest sign / verify and inspect of the JNF model;
// a changed scale byte is then caught like any other (exit 3).
func TestInspectFP8(t *testing.T) {
	src := hftest.FP8Checkpoint(t, hftest.FP8{})
	// Per expert: 3·32·64 F8 bytes + (2·2 + 2·2 + 3·1) F32 scales = 6144 + 44; top-2 of 2 MoE layers.
	const prec = "fp8 (e4m3, 24×40 blocks, dynamic activation scales)"
	out, err := runCLI(t, "", "inspect", src)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{prec, "(6188 bytes): 6144 weights + 44 scales", "(24752 bytes): 24576 weights + 176 scales", "block-FP8 scales"} {
		if !strings.Contains(out, w) {
			t.Errorf("inspect of the checkpoint lacks %q:\n%s", w, out)
		}
	}
	js, err := runCLI(t, "", "inspect", src, "--json")
	var s struct {
		Precision   string `json:"precision"`
		ScaleBytes  int64  `json:"scale_bytes_per_expert"`
		RoutedBytes int64  `json:"routed_expert_bytes_per_token"`
	}
	if err != nil || json.Unmarshal([]byte(js), &s) != nil || s.Precision != prec || s.ScaleBytes != 44 || s.RoutedBytes != 4*6188 {
		t.Errorf("inspect --json: %v %+v", err, s)
	}

	dir := filepath.Join(t.TempDir(), "m")
	if out, err := runCLI(t, "", "convert", src, "--out", dir, "--verify"); err != nil || !strings.Contains(out, "compared byte for byte") {
		t.Fatalf("convert: %v\n%s", err, out)
	}
	if out, err := runCLI(t, "", "verify", dir); err != nil || !strings.Contains(out, "ok: root") {
		t.Fatalf("verify: %v\n%s", err, out)
	}
	key := filepath.Join(t.TempDir(), "k")
	if _, err := runCLI(t, "", "keys", "generate", "--out", key); err != nil {
		t.Fatal(err)
	}
	if _, err := runCLI(t, "", "manifest", "sign", dir, "--key", key); err != nil {
		t.Fatal(err)
	}
	if out, err := runCLI(t, "", "manifest", "verify", dir, "--pub", key+".pub"); err != nil || !strings.Contains(out, "ok:") {
		t.Fatalf("manifest verify: %v %s", err, out)
	}
	m, _, err := verify.LoadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	out, err = runCLI(t, "", "inspect", dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{prec, "(6188 bytes): 6144 weights + 44 scales", "(24752 bytes): 24576 weights + 176 scales", "(13 F8_E4M3), 16 experts", m.Root, m.WeightsRoot} {
		if !strings.Contains(out, w) {
			t.Errorf("inspect of the JNF model lacks %q:\n%s", w, out)
		}
	}

	// One byte of one expert's down_proj scales (its last 12 bytes), changed.
	var ex verify.Entry
	for _, e := range m.Entries {
		if e.Kind == jnf.KindExpert && e.Name == "model.layers.1.mlp.experts.6" {
			ex = e
		}
	}
	p := filepath.Join(dir, ex.File)
	b, _ := os.ReadFile(p)
	b[ex.Offset+ex.Length-5] ^= 0x01
	os.WriteFile(p, b, 0o644)
	if _, err := runCLI(t, "", "verify", dir); exitCode(err) != exitNotExact || !strings.Contains(err.Error(), "layer 1 expert 6") {
		t.Errorf("verify of a changed scale: exit %d, %v", exitCode(err), err)
	}
	if _, err := runCLI(t, "", "manifest", "verify", dir, "--pub", key+".pub"); exitCode(err) != exitNotExact {
		t.Errorf("manifest verify of a changed scale: exit %d (%v)", exitCode(err), err)
	}
}

// TestConvertFP8RefusalExit: a non-finite scale stops convert with exit 1
// (bad input), naming the tensor and element.
func TestConvertFP8RefusalExit(t *testing.T) {
	src := hftest.FP8Checkpoint(t, hftest.FP8{Edit: func(ts []hftest.Tensor) []hftest.Tensor {
		for i := range ts {
			if ts[i].Name == "model.language_model.layers.0.linear_attn.out_proj.weight_scale_inv" {
				copy(ts[i].Data[4:], []byte{0, 0, 0xc0, 0x7f}) // NaN
			}
		}
		return ts
	}})
	_, err := runCLI(t, "", "convert", src, "--out", filepath.Join(t.TempDir(), "m"))
	if exitCode(err) == 0 || !strings.Contains(err.Error(), "tensor model.layers.0.linear_attn.out_proj.weight_scale_inv (model.safetensors): element 1 is NaN") {
		t.Errorf("exit %d, %v", exitCode(err), err)
	}
}
