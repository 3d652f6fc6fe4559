package reports

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/tarfa-ai/tarfa/attest"
	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/ledger"
)

// RunView is a run report prepared for people: the predicate, who signed
// it, and whether (and how) it was verified.
type RunView struct {
	Predicate attest.RunPredicate `json:"predicate"`
	KeyID     string              `json:"keyid"`
	// Verified lists the checks that passed; empty when the report was
	// only read (its signature not checked).
	Verified []string `json:"verified"`
	// Stated lists what the verification did not check (attest.RunResult.Stated).
	Stated []string `json:"stated,omitempty"`
	// Decode, if set, turns generated token ids into text (the model's
	// tokenizer); without it the output shows the ids. Tokenizer says
	// which tokenizer that is, for people.
	Decode    func(ids []int) (string, error) `json:"-"`
	Tokenizer string                          `json:"tokenizer,omitempty"`
}

// RunFormats are the formats RenderRun writes.
var RunFormats = []string{"text", "md", "html", "json"}

// RenderRun writes v in one of RunFormats.
func RenderRun(w io.Writer, v *RunView, format string) error {
	s := summarise(v)
	switch format {
	case "text":
		return runText(w, s)
	case "md":
		return runMarkdown(w, s)
	case "html":
		return runHTML.Execute(w, s)
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	return fmt.Errorf("format %q: want one of %s", format, strings.Join(RunFormats, ", "))
}

// runSummary is what every human format shows.
type runSummary struct {
	V         *RunView
	P         *attest.RunPredicate
	Mode      string
	Signer    string
	Status    string // verification status line
	Manifest  string
	Build     string
	Golden    string
	Prompts   []promptRow
	Layers    []layerRow
	KLine     string
	Bytes     string
	Scrub     string // what the run re-verified of its resident copies
	Distinct  int
	TotalSecs string
	// OutputHead says how the outputs are shown: decoded with which
	// tokenizer, or as ids.
	OutputHead string
}

type promptRow struct {
	Index, Prompt, Generated, Stop, TokS, Chain, Routing, Golden string
	// Source is the prompt as given (the prompt file's line, or a served
	// response's id); Output what came out: the decoded text, or the ids.
	Source, Output string
	// Decoded says Output is text (else it is the ids).
	Decoded bool
}

type layerRow struct {
	Layer, Distinct, Slots, Storage, RAM, Device, Bytes string
}

func short(hx string) string {
	if len(hx) > 16 {
		return hx[:16] + "…"
	}
	return hx
}

func summarise(v *RunView) *runSummary {
	p := &v.Predicate
	s := &runSummary{V: v, P: p, Mode: strings.ToUpper(p.Mode)}
	s.Signer = "keyid " + v.KeyID
	if len(v.Verified) == 0 {
		s.Status = "NOT VERIFIED — this shows what the report says; check it with tarfa attest verify"
	} else {
		s.Status = "verified: " + strings.Join(v.Verified, "; ")
	}
	sig := p.Model.Signature
	switch sig.Status {
	case attest.SignatureVerified:
		s.Manifest = fmt.Sprintf("signed by keyid %s (verified at run time), model name %q", sig.KeyID, sig.Subject)
	case attest.SignaturePresent:
		s.Manifest = fmt.Sprintf("manifest.sig.json present (keyid hint %s), not checked at run time", sig.KeyID)
	default:
		s.Manifest = "unsigned (no manifest.sig.json)"
	}
	b := p.Build
	s.Build = fmt.Sprintf("tarfa %s (%s), %s %s/%s", b.Tarfa, short(b.Commit), b.Go, b.GOOS, b.GOARCH)
	if b.GOAMD64 != "" {
		s.Build += " " + b.GOAMD64
	}
	s.Build += fmt.Sprintf(", %s kernels, backend %s (%d threads)", b.Kernels, b.Backend, b.Threads)
	if p.Golden != nil {
		s.Golden = fmt.Sprintf("%s: exact=%v", p.Golden.ID, p.Golden.Exact)
	}
	var secs float64
	for _, pr := range p.Prompts {
		toks := "-"
		if n := len(pr.Generated) - 1; n > 0 && pr.DecodeSeconds > 0 {
			toks = fmt.Sprintf("%.1f", float64(n)/pr.DecodeSeconds)
		}
		secs += pr.PrefillSeconds + pr.DecodeSeconds
		g := "-"
		if pr.Golden != nil {
			g = fmt.Sprintf("%d/%d identical", pr.Golden.Identical, pr.Golden.Steps)
			if pr.Golden.Exact {
				g += " ✓"
			} else {
				g += fmt.Sprintf(", first divergent step %d", pr.Golden.FirstDivergent)
			}
		}
		row := promptRow{Index: strconv.Itoa(pr.Index), Prompt: strconv.Itoa(len(pr.PromptTokens)),
			Generated: strconv.Itoa(len(pr.Generated)), Stop: pr.StopReason, TokS: toks, Chain: short(pr.LogitsChain),
			Routing: short(pr.RoutingDigest), Golden: g, Source: pr.Source, Output: fmt.Sprint(pr.Generated)}
		if v.Decode != nil {
			if text, err := v.Decode(pr.Generated); err == nil {
				row.Output, row.Decoded = text, true
			} else {
				row.Output = fmt.Sprintf("%v (not decoded: %v)", pr.Generated, err)
			}
		}
		s.Prompts = append(s.Prompts, row)
	}
	s.TotalSecs = fmt.Sprintf("%.2f", secs)
	s.OutputHead = "Outputs as token ids (give --tokenizer DIR to decode them)."
	if v.Decode != nil {
		s.OutputHead = "Outputs decoded with " + v.Tokenizer + "."
	}
	type acc struct {
		distinct               int
		slots, st, ram, dev, b int64
	}
	by := map[int]*acc{}
	for _, u := range p.Experts {
		a := by[u.Layer]
		if a == nil {
			a = &acc{}
			by[u.Layer] = a
		}
		a.distinct++
		a.slots += u.Tokens
		a.st += u.Uses[ledger.TierStorage]
		a.ram += u.Uses[ledger.TierRAM]
		a.dev += u.Uses[ledger.TierDevice]
	}
	layers := make([]int, 0, len(by))
	for l := range by {
		layers = append(layers, l)
	}
	sort.Ints(layers)
	for _, l := range layers {
		a := by[l]
		s.Layers = append(s.Layers, layerRow{Layer: strconv.Itoa(l), Distinct: strconv.Itoa(a.distinct), Slots: strconv.FormatInt(a.slots, 10),
			Storage: strconv.FormatInt(a.st, 10), RAM: strconv.FormatInt(a.ram, 10), Device: strconv.FormatInt(a.dev, 10)})
		s.Distinct += a.distinct
	}
	allK, entries := true, map[int64]bool{}
	for _, lk := range p.KPerLayer {
		for k, n := range lk.K {
			allK = allK && k == p.Model.TopK
			entries[n] = true
		}
	}
	if allK {
		s.KLine = fmt.Sprintf("k = %d (the model's top-k) in every routing entry of %s", p.Model.TopK, count(len(p.KPerLayer), "MoE layer"))
	} else {
		s.KLine = fmt.Sprintf("WARNING: a routing entry used a k other than the model's top-k %d", p.Model.TopK)
	}
	var parts []string
	for _, alg := range []jnf.Alg{jnf.BLAKE3, jnf.SHA256} {
		if n := p.Hashed[alg]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %s", Bytes(n), alg))
		}
	}
	s.Bytes = strings.Join(parts, ", ")
	if s.Bytes == "" {
		s.Bytes = "-"
	}
	in := p.Integrity
	switch {
	case in.Scrub == "":
		s.Scrub = "not stated (a report from before scrubbing was recorded)"
	default:
		s.Scrub = fmt.Sprintf("schedule %s; %s, %s re-hashed (%s after the last prompt)", in.Scrub, count(int(in.Passes), "pass"), Bytes(in.ScrubbedBytes), Bytes(in.FinalBytes))
		if in.ScrubFailures > 0 {
			s.Scrub += fmt.Sprintf("; %s found changed before a use and read again", count(int(in.ScrubFailures), "resident copy"))
		} else {
			s.Scrub += "; no copy found changed"
		}
	}
	if in.DeviceVerify {
		s.Scrub += fmt.Sprintf("; every expert copied to the device re-hashed there (%s, and %s by scrubs of its resident copies)",
			Bytes(in.DeviceVerifiedBytes), Bytes(in.DeviceScrubbedBytes))
	}
	return s
}

func runText(w io.Writer, s *runSummary) error {
	p := s.P
	var b bytes.Buffer
	fmt.Fprintf(&b, "Tarfa run report · %s mode\n", s.Mode)
	fmt.Fprintf(&b, "model      %s, %d layers, %d experts, top-k %d\n", p.Model.Arch, p.Model.Layers, p.Model.Experts, p.Model.TopK)
	fmt.Fprintf(&b, "root       %s\nweights    %s\n", p.Model.Root, p.Model.WeightsRoot)
	fmt.Fprintf(&b, "manifest   %s\n", s.Manifest)
	fmt.Fprintf(&b, "signer     %s\nstatus     %s\n", s.Signer, s.Status)
	if len(s.V.Stated) > 0 {
		fmt.Fprintf(&b, "unchecked  stated, not checked: %s\n", strings.Join(s.V.Stated, "; "))
	}
	fmt.Fprintf(&b, "build      %s\n", s.Build)
	fmt.Fprintf(&b, "host       %s, %s, %d cores\n", p.Host.OS, p.Host.CPU, p.Host.Cores)
	fmt.Fprintf(&b, "time       %s → %s (%s s generating; load %.2f s, %d tensors verified)\n", p.StartedAt.Format("2006-01-02 15:04:05Z07:00"),
		p.FinishedAt.Format("15:04:05"), s.TotalSecs, p.Load.Seconds, p.Load.Tensors)
	if s.Golden != "" {
		fmt.Fprintf(&b, "golden     %s\n", s.Golden)
	}
	fmt.Fprintf(&b, "routing    %s\nhashed     %s; %s used\nscrub      %s\n\n", s.KLine, s.Bytes, count(s.Distinct, "distinct expert"), s.Scrub)
	if _, err := w.Write(b.Bytes()); err != nil {
		return err
	}
	var rows [][]string
	for _, r := range s.Prompts {
		rows = append(rows, []string{r.Index, r.Prompt, r.Generated, r.Stop, r.TokS, r.Chain, r.Routing, r.Golden})
	}
	if err := Table(w, []string{"prompt", "prompt tokens", "generated", "stop", "decode tok/s", "logits chain", "routing", "golden"}, rows); err != nil {
		return err
	}
	b.Reset()
	fmt.Fprintf(&b, "\n%s\n", s.OutputHead)
	for _, r := range s.Prompts {
		out := r.Output
		if r.Decoded {
			out = strconv.Quote(out)
		}
		fmt.Fprintf(&b, "prompt %s\n  source  %s\n  output  %s\n", r.Index, strconv.Quote(r.Source), out)
	}
	if _, err := w.Write(b.Bytes()); err != nil {
		return err
	}
	rows = rows[:0]
	for _, r := range s.Layers {
		rows = append(rows, []string{r.Layer, r.Distinct, r.Slots, r.Storage, r.RAM, r.Device})
	}
	fmt.Fprintln(w)
	return Table(w, []string{"layer", "distinct experts", "token slots", "storage (read+hashed)", "RAM tier", "device"}, rows)
}

func mdEscape(s string) string { return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s) }

// mdCode is s as inline code in a table cell: a fence longer than any run
// of backticks in s, and '|' escaped.
func mdCode(s string) string {
	fence := "`"
	for strings.Contains(s, fence) {
		fence += "`"
	}
	return fence + " " + mdEscape(s) + " " + fence
}

// count is "1 pass", "2 passes", "3 resident copies".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	switch {
	case strings.HasSuffix(noun, "ss"):
		noun += "es"
	case strings.HasSuffix(noun, "y"):
		noun = noun[:len(noun)-1] + "ies"
	default:
		noun += "s"
	}
	return strconv.Itoa(n) + " " + noun
}

func runMarkdown(w io.Writer, s *runSummary) error {
	p := s.P
	var b strings.Builder
	fmt.Fprintf(&b, "# Tarfa run report · %s mode\n\n", s.Mode)
	fmt.Fprintf(&b, "| | |\n|---|---|\n")
	for _, kv := range [][2]string{
		{"model", fmt.Sprintf("%s, %d layers, %d experts, top-k %d", p.Model.Arch, p.Model.Layers, p.Model.Experts, p.Model.TopK)},
		{"root", "`" + p.Model.Root.String() + "`"}, {"weights_root", "`" + p.Model.WeightsRoot.String() + "`"},
		{"manifest", s.Manifest}, {"signer", s.Signer}, {"status", s.Status}, {"stated, not checked", strings.Join(s.V.Stated, "; ")}, {"build", s.Build},
		{"golden", s.Golden}, {"routing", s.KLine}, {"hashed", s.Bytes + "; " + s.DistinctLine() + " used"}, {"scrub", s.Scrub},
	} {
		if kv[1] != "" {
			fmt.Fprintf(&b, "| %s | %s |\n", kv[0], mdEscape(kv[1]))
		}
	}
	b.WriteString("\n## Prompts\n\n| prompt | prompt tokens | generated | stop | decode tok/s | logits chain | routing | golden |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range s.Prompts {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | `%s` | `%s` | %s |\n", r.Index, r.Prompt, r.Generated, r.Stop, r.TokS, r.Chain, r.Routing, mdEscape(r.Golden))
	}
	fmt.Fprintf(&b, "\n## Outputs\n\n%s\n\n| prompt | source | output |\n|---|---|---|\n", mdEscape(s.OutputHead))
	for _, r := range s.Prompts {
		out := r.Output
		if r.Decoded {
			out = strconv.Quote(out)
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", r.Index, mdCode(strconv.Quote(r.Source)), mdCode(out))
	}
	b.WriteString("\n## Experts by layer\n\nUses of each expert by where its bytes came from: storage (read and hashed for the use), the RAM tier or the device level (a resident copy, verified when it was read).\n\n| layer | distinct experts | token slots | storage (read+hashed) | RAM tier | device |\n|---|---|---|---|---|---|\n")
	for _, r := range s.Layers {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", r.Layer, r.Distinct, r.Slots, r.Storage, r.RAM, r.Device)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

//go:embed run.html.tmpl
var templates embed.FS

var runHTML = template.Must(template.ParseFS(templates, "run.html.tmpl"))

// DistinctLine is "N distinct experts", for the HTML page.
func (s *runSummary) DistinctLine() string { return count(s.Distinct, "distinct expert") }
