package reports

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tarfa-ai/tarfa/attest"
	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/ledger"
)

func sampleView(verified bool) *RunView {
	d := jnf.SHA256Bytes([]byte("m"))
	p := attest.RunPredicate{
		Model: attest.RunModel{Root: d, WeightsRoot: d, Arch: "qwen3_5_moe<script>alert(1)</script>", Layers: 2, Experts: 8, TopK: 2,
			Signature: attest.RunManifestSignature{Status: attest.SignatureNone}},
		Build:  attest.RunBuild{Tarfa: "v|1", Commit: "abc", Go: "go1.26.8", GOOS: "linux", GOARCH: "amd64", Kernels: "avx2", Backend: "cpu", Threads: 2},
		Mode:   ledger.ModeExact,
		Hashed: map[jnf.Alg]int64{jnf.BLAKE3: 3 << 20},
		Prompts: []attest.RunPrompt{{Index: 0, Source: `{"tokens": [1, 2]}`, PromptTokens: []int{1, 2}, Generated: []int{3, 4, 5}, StopReason: "length", Transcript: d,
			LogitsChain: strings.Repeat("a", 64), RoutingDigest: strings.Repeat("b", 64), DecodeSeconds: 0.5,
			Golden: &attest.PromptGolden{Exact: true, Steps: 3, Identical: 3, FirstDivergent: -1}}},
		Experts: []ledger.ExpertUse{{Layer: 1, Expert: 3, Digest: d, Tokens: 4, Uses: map[ledger.Tier]int64{ledger.TierStorage: 1, ledger.TierRAM: 2}},
			{Layer: 1, Expert: 5, Digest: d, Tokens: 4, Uses: map[ledger.Tier]int64{ledger.TierStorage: 1, ledger.TierDevice: 3}}},
		KPerLayer: []ledger.LayerK{{Layer: 1, K: map[int]int64{2: 4}}},
		Golden:    &attest.RunGolden{ID: "sha256:" + strings.Repeat("c", 64), Exact: true},
		Integrity: attest.RunIntegrity{Scrub: "use,10m0s", Passes: 3, ScrubbedBytes: 5 << 20, ScrubFailures: 1, FinalBytes: 2 << 20,
			DeviceVerify: true, DeviceVerifiedBytes: 3 << 20, DeviceScrubbedBytes: 1 << 20},
		StartedAt: time.Unix(0, 0).UTC(), FinishedAt: time.Unix(9, 0).UTC(),
	}
	v := &RunView{Predicate: p, KeyID: "kid"}
	if verified {
		v.Verified = []string{"signature by key kid"}
	}
	return v
}

func TestRenderRun(t *testing.T) {
	for _, f := range RunFormats {
		for _, verified := range []bool{false, true} {
			var b bytes.Buffer
			if err := RenderRun(&b, sampleView(verified), f); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			out := b.String()
			if f == "json" {
				var back RunView
				if err := json.Unmarshal(b.Bytes(), &back); err != nil || back.Predicate.Prompts[0].RoutingDigest != strings.Repeat("b", 64) {
					t.Errorf("json: %v", err)
				}
				continue
			}
			for _, want := range []string{"EXACT", "top-k 2", "of 1 MoE layer", "4.0 tok/s"[:3], d16("b"), "3/3 identical",
				"schedule use,10m0s; 3 passes, 5.0 MiB re-hashed (2.0 MiB after the last prompt); 1 resident copy found changed before a use",
				"2 distinct experts used", `tokens`, "[1, 2]}", "[3 4 5]", "give --tokenizer DIR",
				"every expert copied to the device re-hashed there (3.0 MiB, and 1.0 MiB by scrubs of its resident copies)"} {
				if !strings.Contains(out, want) {
					t.Errorf("%s (verified %v): no %q in\n%s", f, verified, want, out)
				}
			}
			// Uses per level, apart: storage 2, RAM tier 2, device 3.
			if row := map[string]string{"text": "storage (read+hashed)", "md": "| 1 | 2 | 8 | 2 | 2 | 3 |", "html": "<th class=\"num\">device</th>"}[f]; !strings.Contains(out, row) {
				t.Errorf("%s: the uses per level (%q) missing in\n%s", f, row, out)
			}
			if strings.Contains(out, "NOT VERIFIED") == verified {
				t.Errorf("%s: verified=%v but the output says otherwise:\n%s", f, verified, out)
			}
			if f == "html" && (strings.Contains(out, "<script>alert") || !strings.Contains(out, "&lt;script&gt;")) {
				t.Errorf("html does not escape the report's strings")
			}
			if f == "md" && !strings.Contains(out, `v\|1`) {
				t.Errorf("markdown does not escape '|'")
			}
		}
	}
	if err := RenderRun(&bytes.Buffer{}, sampleView(false), "pdf"); err == nil {
		t.Error("unknown format accepted")
	}
}

func d16(c string) string { return strings.Repeat(c, 16) }

// TestRenderRunOutputs: every human format shows each prompt's source and
// what came out — decoded with the tokenizer when one is given, else the
// ids — and the grammar and alignment of its counts (newcomer review m5,
// p1, p7).
func TestRenderRunOutputs(t *testing.T) {
	for _, f := range []string{"text", "md", "html"} {
		v := sampleView(true)
		v.Predicate.Integrity.Passes = 1
		v.Decode = func(ids []int) (string, error) {
			if len(ids) != 3 || ids[0] != 3 {
				t.Errorf("decoded %v, want the generated ids", ids)
			}
			return "Paris <b>|", nil
		}
		v.Tokenizer = "tok/tokenizer.json"
		var b bytes.Buffer
		if err := RenderRun(&b, v, f); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		want := map[string][]string{
			"text": {`source  "{\"tokens\": [1, 2]}"`, `output  "Paris <b>|"`},
			"md":   {"| 0 | ` \"{\\\"tokens\\\": [1, 2]}\" ` | ` \"Paris <b>\\|\" ` |"},
			"html": {`<pre class="out">Paris &lt;b&gt;|</pre>`, `<th class="num">distinct experts</th>`, `<th class="num">token slots</th>`, "th.num { text-align: right; }",
				`<td class="num">2</td><td class="num">3</td></tr>`},
		}[f]
		for _, w := range append(want, "decoded with tok/tokenizer.json", "1 pass,") {
			if !strings.Contains(out, w) {
				t.Errorf("%s: no %q in\n%s", f, w, out)
			}
		}
		if strings.Contains(out, "1 passes") || strings.Contains(out, "[3 4 5]") {
			t.Errorf("%s: ids or bad grammar where text was decoded:\n%s", f, out)
		}
	}
}
