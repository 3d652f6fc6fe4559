// Package golden stores and compares golden logits: for each prompt, the
// prompt tokens, the generated tokens and the full fp32 logits of every
// generation step, with a SHA-256 hash chain over the raw logits bytes and
// the manifest root of the model that produced them. It never imports the
// engine: runs are produced elsewhere (engine/runner) and handed in as values.
//
// # Directory
//
//	G/golden.json        metadata (Golden), including every step's chain value
//	G/logits.safetensors one F32 tensor "promptI.logits" of shape [steps, vocab] per prompt
//
// # Hash chain
//
//	c₀     = SHA-256("tarfa-golden-v1\n" ‖ model root (32 bytes) ‖ prompt tokens as u32 LE)
//	cⱼ₊₁   = SHA-256(cⱼ ‖ logits of step j as IEEE-754 binary32 LE)
//
// Step j is the distribution that produced generated token j (step 0 is the
// last prompt position after prefill). The chain binds each step to the
// model, the prompt and every earlier step, so a replay can name the first
// step that differs without storing anything but the chain.
package golden

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
)

// Format identifiers.
const (
	Format  = "tarfa-golden"
	Version = 1
)

// Sampling is the decoding configuration of one prompt.
type Sampling struct {
	Temperature float64 `json:"temperature"` // 0 = greedy
	TopP        float64 `json:"top_p,omitempty"`
	TopK        int     `json:"top_k,omitempty"`
	Seed        uint64  `json:"seed"`
}

// Run is one prompt's generation: what a recorder stores and a replay
// produces again.
type Run struct {
	PromptTokens []int       `json:"prompt_tokens"`
	Generated    []int       `json:"generated"`
	MaxTokens    int         `json:"max_tokens"`
	Stop         []int       `json:"stop,omitempty"`
	Sampling     Sampling    `json:"sampling"`
	Logits       [][]float32 `json:"-"` // one row of length vocab per generated token
}

// PromptRecord is the stored metadata of one prompt.
type PromptRecord struct {
	Index  int    `json:"index"`
	Source string `json:"source"` // the JSONL line it came from
	Run
	Tensor string   `json:"logits_tensor"`
	Chain  []string `json:"chain"` // hex cⱼ₊₁ for every step j
}

// Golden is golden.json.
type Golden struct {
	Format      string         `json:"format"`
	Version     int            `json:"version"`
	ModelRoot   string         `json:"model_root"`
	WeightsRoot string         `json:"weights_root,omitempty"`
	Arch        string         `json:"arch"`
	Vocab       int            `json:"vocab"`
	Backend     string         `json:"backend"`
	Threads     int            `json:"threads"`
	Tarfa       string         `json:"tarfa_version"`
	Prompts     []PromptRecord `json:"prompts"`
}

// ChainStart is c₀ for a model root and prompt.
func ChainStart(root [32]byte, prompt []int) [32]byte {
	h := sha256.New()
	h.Write([]byte("tarfa-golden-v1\n"))
	h.Write(root[:])
	var b [4]byte
	for _, t := range prompt {
		binary.LittleEndian.PutUint32(b[:], uint32(t))
		h.Write(b[:])
	}
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// ChainNext is cⱼ₊₁ from cⱼ and the logits of step j.
func ChainNext(prev [32]byte, logits []float32) [32]byte {
	h := sha256.New()
	h.Write(prev[:])
	h.Write(f32Bytes(logits))
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// Chain computes the chain values of a run.
func Chain(root [32]byte, r *Run) []string {
	c := ChainStart(root, r.PromptTokens)
	out := make([]string, len(r.Logits))
	for j, row := range r.Logits {
		c = ChainNext(c, row)
		out[j] = hex.EncodeToString(c[:])
	}
	return out
}

func f32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func parseRoot(s string) ([32]byte, error) {
	var r [32]byte
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 32 {
		return r, fmt.Errorf("model root %q is not 64 hex digits", s)
	}
	copy(r[:], b)
	return r, nil
}
