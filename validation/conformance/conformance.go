// Package conformance checks the CPU reference engine against Hugging Face
// reference outputs: a checkpoint is converted to a temporary JNF directory,
// opened through the verified path, and every reference prompt's logits
// (every position) and 12-token greedy continuation are compared with the
// fp32 reference; the bf16 reference figures are reported for information.
package conformance

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/tarfa-ai/tarfa/convert"
	"github.com/tarfa-ai/tarfa/engine"
	"github.com/tarfa-ai/tarfa/golden"
	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/jnf/safetensors"
	"github.com/tarfa-ai/tarfa/runner"
	"github.com/tarfa-ai/tarfa/tier"
)

// DefaultAtol applies when reference.json has no "atol".
const DefaultAtol = 5e-4

// Reference is a fixture's reference.json plus its logits.
type Reference struct {
	Name    string           `json:"name"`
	Prompts [][]int          `json:"prompts"`
	Greedy  map[string][]int `json:"greedy"`
	Atol    *float64         `json:"atol"`
	fp32    [][]float32      // per prompt, [len × vocab]
	bf16    [][]float32
}

// ReadReference loads DIR/reference.json and DIR/reference.safetensors.
func ReadReference(dir string, vocab int) (*Reference, error) {
	b, err := os.ReadFile(filepath.Join(dir, "reference.json"))
	if err != nil {
		return nil, err
	}
	var r Reference
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %v", filepath.Join(dir, "reference.json"), err)
	}
	if len(r.Prompts) == 0 {
		return nil, fmt.Errorf("%s: no prompts", filepath.Join(dir, "reference.json"))
	}
	f, err := safetensors.Open(filepath.Join(dir, "reference.safetensors"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	read := func(name string, n int) ([]float32, error) {
		t, data, err := f.ReadTensor(name)
		if err != nil {
			return nil, err
		}
		if t.DType != jnf.F32 || len(t.Shape) != 2 || t.Shape[0] != int64(n) || t.Shape[1] != int64(vocab) {
			return nil, fmt.Errorf("%s: tensor %s is %s %v, want F32 [%d %d]", f.Path, name, t.DType, t.Shape, n, vocab)
		}
		out := make([]float32, len(data)/4)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
		}
		return out, nil
	}
	for i, p := range r.Prompts {
		a, err := read(fmt.Sprintf("prompt%d.logits.fp32", i), len(p))
		if err != nil {
			return nil, err
		}
		r.fp32 = append(r.fp32, a)
		bb, err := read(fmt.Sprintf("prompt%d.logits.bf16", i), len(p))
		if err != nil {
			return nil, err
		}
		r.bf16 = append(r.bf16, bb)
	}
	return &r, nil
}

// PromptResult is one prompt's comparison.
type PromptResult struct {
	Index        int       `json:"index"`
	Tokens       int       `json:"tokens"`
	MaxAbs       float64   `json:"max_abs"` // over every position, vs fp32
	MaxAbsAt     []float64 `json:"max_abs_per_position"`
	ArgmaxAt     []bool    `json:"argmax_agree_per_position"`
	ArgmaxAgree  int       `json:"argmax_agree"`      // positions whose argmax matches fp32
	Greedy       []int     `json:"greedy"`            // our 12 tokens
	GreedyFP32   []int     `json:"greedy_fp32"`       // reference
	GreedyMatch  bool      `json:"greedy_match"`      // identical to fp32
	MaxAbsBF16   float64   `json:"max_abs_bf16"`      // information only
	GreedyBF16OK int       `json:"greedy_bf16_agree"` // leading tokens equal to the bf16 continuation
	Pass         bool      `json:"pass"`
}

// Report is the whole comparison.
type Report struct {
	Checkpoint string         `json:"checkpoint"`
	Reference  string         `json:"reference"`
	Root       string         `json:"model_root"`
	Atol       float64        `json:"atol"`
	Prompts    []PromptResult `json:"prompts"`
	Pass       bool           `json:"pass"`
	// ExpertEvals is the routed-expert evaluations per MoE layer; each must
	// equal top-k × tokens processed.
	ExpertEvalsOK bool `json:"expert_evals_equal_topk"`
}

// Options controls Run.
type Options struct {
	Threads int
	Backend string // the engine backend ("" = cpu)
	Scratch string // where the temporary JNF goes (default: a temp dir, removed)
}

// Run converts checkpoint, runs every reference prompt and compares.
func Run(ctx context.Context, checkpoint, reference string, opt Options) (*Report, error) {
	scratch := opt.Scratch
	if scratch == "" {
		d, err := os.MkdirTemp("", "tarfa-validate-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		scratch = d
	}
	dir := filepath.Join(scratch, "jnf")
	if _, err := convert.Convert(ctx, checkpoint, dir, convert.Options{LastLayer: -1}); err != nil {
		return nil, err
	}
	r, err := runner.Open(ctx, dir, runner.Options{Threads: opt.Threads, Backend: opt.Backend,
		Tier: &tier.Options{RAMBudget: tier.Auto, StagingBudget: tier.Auto}})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	V := r.Config.Vocab
	ref, err := ReadReference(reference, V)
	if err != nil {
		return nil, err
	}
	rep := &Report{Checkpoint: checkpoint, Reference: reference, Root: r.Checkpoint.Root().Hex(), Atol: DefaultAtol, Pass: true}
	if ref.Atol != nil {
		rep.Atol = *ref.Atol
	}
	var tokens int64
	for i, p := range ref.Prompts {
		pr := PromptResult{Index: i, Tokens: len(p), GreedyFP32: ref.Greedy[fmt.Sprintf("prompt%d.fp32", i)]}
		lg, err := r.Engine.NewSession().Forward(p, true)
		if err != nil {
			return nil, fmt.Errorf("prompt %d: %w", i, err)
		}
		tokens += int64(len(p))
		for pos := range p {
			want := ref.fp32[i][pos*V : (pos+1)*V]
			wantB := ref.bf16[i][pos*V : (pos+1)*V]
			worst := 0.0
			for j := range want {
				d := math.Abs(float64(lg[pos][j]) - float64(want[j]))
				if d > worst || d != d {
					worst = d
				}
				pr.MaxAbsBF16 = math.Max(pr.MaxAbsBF16, math.Abs(float64(lg[pos][j])-float64(wantB[j])))
			}
			pr.MaxAbsAt = append(pr.MaxAbsAt, worst)
			if worst > pr.MaxAbs || worst != worst {
				pr.MaxAbs = worst
			}
			agree := golden.Argmax(lg[pos]) == golden.Argmax(want)
			pr.ArgmaxAt = append(pr.ArgmaxAt, agree)
			if agree {
				pr.ArgmaxAgree++
			}
		}
		n := len(pr.GreedyFP32)
		if n == 0 {
			n = 12
		}
		res, err := engine.Generate(ctx, r.Engine.NewSession(), p, engine.GenOptions{MaxTokens: n}, nil)
		if err != nil {
			return nil, fmt.Errorf("prompt %d greedy: %w", i, err)
		}
		tokens += int64(len(p) + len(res.Tokens) - 1)
		pr.Greedy = res.Tokens
		pr.GreedyMatch = pr.GreedyFP32 != nil && slices.Equal(res.Tokens, pr.GreedyFP32)
		for j, t := range ref.Greedy[fmt.Sprintf("prompt%d.bf16", i)] {
			if j >= len(res.Tokens) || res.Tokens[j] != t {
				break
			}
			pr.GreedyBF16OK++
		}
		pr.Pass = pr.MaxAbs <= rep.Atol && pr.GreedyMatch
		rep.Pass = rep.Pass && pr.Pass
		rep.Prompts = append(rep.Prompts, pr)
	}
	st := r.Engine.Stats()
	rep.ExpertEvalsOK = true
	for l, n := range st.ExpertEvals {
		if r.Config.Sparse[l] && n != int64(st.TopK)*st.Tokens {
			rep.ExpertEvalsOK = false
		}
	}
	rep.Pass = rep.Pass && rep.ExpertEvalsOK
	return rep, nil
}
