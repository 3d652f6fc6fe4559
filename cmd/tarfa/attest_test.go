package main

import (
	"encoding/base64"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tarfa-ai/tarfa/attest"
	"github.com/tarfa-ai/tarfa/golden"
)

// TestAttestRunVerifyShow: a signed run report of a converted fixture
// verifies offline with only its manifest.json and by replay; a tampered
// byte, another key, another model and a forged (re-signed) routing digest
// all exit 3; report show renders it in every format, saying whether it was
// verified.
func TestAttestRunVerifyShow(t *testing.T) {
	tmp := t.TempDir()
	model := filepath.Join(tmp, "m")
	if _, err := runCLI(t, "", "convert", fixtures+"qwen35moe-dev-c/checkpoint", "--out", model); err != nil {
		t.Fatal(err)
	}
	key, other := filepath.Join(tmp, "k"), filepath.Join(tmp, "o")
	for _, k := range []string{key, other} {
		if _, err := runCLI(t, "", "keys", "generate", "--out", k); err != nil {
			t.Fatal(err)
		}
	}
	prompts := filepath.Join(tmp, "p.jsonl")
	os.WriteFile(prompts, []byte(`{"tokens": [5, 9, 200], "max_tokens": 5}
{"tokens": [17, 3], "max_tokens": 4, "temperature": 0.8, "seed": 42}
`), 0o644)
	g := filepath.Join(tmp, "g")
	if _, err := runCLI(t, "", "golden", "record", "--model", model, "--prompts", prompts, "--out", g); err != nil {
		t.Fatal(err)
	}
	report := filepath.Join(tmp, "r.json")
	out, err := runCLI(t, "", "attest", "run", "--model", model, "--prompts", prompts, "--key", key, "--out", report, "--golden", g,
		"--ram-budget", "0", "--staging-budget", "1MiB")
	if err != nil || !strings.Contains(out, "exact=true") {
		t.Fatalf("attest run: %v\n%s", err, out)
	}
	if _, err := runCLI(t, "", "attest", "run", "--model", model, "--prompts", prompts, "--key", key, "--out", report); exitCode(err) != exitError {
		t.Errorf("attest run over an existing report without --force: exit %d", exitCode(err))
	}
	// Offline: only manifest.json, copied away from the weights.
	alone := filepath.Join(tmp, "alone")
	os.Mkdir(alone, 0o755)
	b, _ := os.ReadFile(filepath.Join(model, "manifest.json"))
	os.WriteFile(filepath.Join(alone, "manifest.json"), b, 0o644)
	out, err = runCLI(t, "", "attest", "verify", report, "--pub", key+".pub", "--manifest", filepath.Join(alone, "manifest.json"))
	if err != nil || !strings.Contains(out, "top-k") || !strings.Contains(out, "ok") {
		t.Fatalf("offline verify: %v\n%s", err, out)
	}
	out, err = runCLI(t, "", "attest", "verify", report, "--pub", key+".pub", "--model", model, "--replay", "--threads", "3")
	if err != nil || !strings.Contains(out, "replay of 2 prompts") {
		t.Fatalf("replay verify: %v\n%s", err, out)
	}
	if _, err := runCLI(t, "", "attest", "verify", report, "--pub", other+".pub", "--manifest", model); exitCode(err) != exitNotExact {
		t.Errorf("another key: exit %d, %v", exitCode(err), err)
	}
	otherModel := filepath.Join(tmp, "om")
	runCLI(t, "", "convert", fixtures+"qwen35moe-dev-c/checkpoint-official", "--out", otherModel)
	if _, err := runCLI(t, "", "attest", "verify", report, "--pub", key+".pub", "--manifest", otherModel); exitCode(err) != exitNotExact || !strings.Contains(err.Error(), "root") {
		t.Errorf("another model: exit %d, %v", exitCode(err), err)
	}
	// A tampered byte of the report.
	var env attest.Envelope
	rb, _ := os.ReadFile(report)
	json.Unmarshal(rb, &env)
	payload, _ := base64.StdEncoding.DecodeString(env.Payload)
	payload[len(payload)/2] ^= 1
	bad := env
	bad.Payload = base64.StdEncoding.EncodeToString(payload)
	bb, _ := json.Marshal(bad)
	tampered := filepath.Join(tmp, "tampered.json")
	os.WriteFile(tampered, bb, 0o644)
	if _, err := runCLI(t, "", "attest", "verify", tampered, "--pub", key+".pub", "--manifest", model); exitCode(err) != exitNotExact {
		t.Errorf("tampered report: exit %d, %v", exitCode(err), err)
	}
	// A forged routing digest, re-signed with the right key: it verifies
	// offline (the signer could lie) but not by replay.
	p, _, err := attest.ReadRunUnverified(env)
	if err != nil {
		t.Fatal(err)
	}
	p.Prompts[0].RoutingDigest = strings.Repeat("0", 64)
	p.Golden = nil
	for i := range p.Prompts {
		p.Prompts[i].Golden = nil
	}
	priv, err := attest.LoadPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	fenv, err := attest.SignRun(priv, p)
	if err != nil {
		t.Fatal(err)
	}
	fb, _ := json.Marshal(fenv)
	forged := filepath.Join(tmp, "forged.json")
	os.WriteFile(forged, fb, 0o644)
	if _, err := runCLI(t, "", "attest", "verify", forged, "--pub", key+".pub", "--manifest", model); err != nil {
		t.Errorf("forged routing, offline: %v", err)
	}
	if _, err := runCLI(t, "", "attest", "verify", forged, "--pub", key+".pub", "--model", model, "--replay"); exitCode(err) != exitNotExact || !strings.Contains(err.Error(), "prompts[0].routing_digest") {
		t.Errorf("forged routing, replay: exit %d, %v", exitCode(err), err)
	}
	// report show.
	for _, f := range []string{"text", "md", "html", "json"} {
		out, err := runCLI(t, "", "report", "show", report, "--format", f)
		if err != nil || (f != "json" && !strings.Contains(out, "NOT VERIFIED")) {
			t.Errorf("report show --format %s: %v\n%.400s", f, err, out)
		}
	}
	out, err = runCLI(t, "", "report", "show", report, "--pub", key+".pub", "--manifest", model)
	if err != nil || strings.Contains(out, "NOT VERIFIED") || !strings.Contains(out, "verified:") {
		t.Errorf("report show, verified: %v\n%s", err, out)
	}
	html := filepath.Join(tmp, "r.html")
	if _, err := runCLI(t, "", "report", "show", report, "--format", "html", "--out", html); err != nil {
		t.Fatal(err)
	}
	if hb, _ := os.ReadFile(html); !strings.HasPrefix(string(hb), "<!DOCTYPE html>") {
		t.Errorf("html report: %.100s", hb)
	}
	// attest run --golden: a prompt file other than the golden's is a usage
	// error; a golden record of another model, or one whose logits differ
	// (as another implementation's would: chains and prompt set recomputed),
	// exits 3 — and the report written says so.
	os.WriteFile(prompts+"2", []byte(`{"tokens": [5, 9, 200], "max_tokens": 5}
{"tokens": [17, 3], "max_tokens": 4, "temperature": 0.8, "seed": 43}
`), 0o644)
	_, err = runCLI(t, "", "attest", "run", "--model", model, "--prompts", prompts+"2", "--key", key, "--out", filepath.Join(tmp, "r2.json"), "--golden", g)
	if exitCode(err) != exitError || !strings.Contains(err.Error(), "differs from the golden record's prompt 1") {
		t.Errorf("attest run with another prompt file: exit %d, %v", exitCode(err), err)
	}
	gOther := filepath.Join(tmp, "gother")
	runCLI(t, "", "golden", "record", "--model", otherModel, "--prompts", prompts, "--out", gOther)
	_, err = runCLI(t, "", "attest", "run", "--model", model, "--prompts", prompts, "--key", key, "--out", filepath.Join(tmp, "r3.json"), "--golden", gOther)
	if exitCode(err) != exitNotExact || !strings.Contains(err.Error(), "not the same model") {
		t.Errorf("attest run against another model's golden: exit %d, %v", exitCode(err), err)
	}
	gr, runs, err := golden.Read(g)
	if err != nil {
		t.Fatal(err)
	}
	runs[1].Logits[2][7] = math.Nextafter32(runs[1].Logits[2][7], 1e9)
	gDiff := filepath.Join(tmp, "gdiff")
	if err := golden.Write(gDiff, gr, runs); err != nil {
		t.Fatal(err)
	}
	r4 := filepath.Join(tmp, "r4.json")
	_, err = runCLI(t, "", "attest", "run", "--model", model, "--prompts", prompts, "--key", key, "--out", r4, "--golden", gDiff)
	if exitCode(err) != exitNotExact {
		t.Errorf("attest run against a golden one ulp away: exit %d, %v", exitCode(err), err)
	}
	out, err = runCLI(t, "", "attest", "verify", r4, "--pub", key+".pub", "--manifest", model, "--json")
	var vr struct{ Checked []string }
	if err != nil || json.Unmarshal([]byte(out), &vr) != nil {
		t.Fatalf("verify of the report of a divergent run: %v", err)
	}
	shown, _ := runCLI(t, "", "report", "show", r4)
	if !strings.Contains(shown, "exact=false") || !strings.Contains(shown, "first divergent step 2") {
		t.Errorf("report of a divergent run:\n%s", shown)
	}
}
