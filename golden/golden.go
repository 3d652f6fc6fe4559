// Package golden stores and compares golden logits: for each prompt, the
// prompt tokens, the generated tokens and the full fp32 logits of every
// generation step, with a SHA-256 hash chain over the raw logits bytes and
// the manifest root of the model that produced them. It never imports the
// engine: runs are produced elsewhere (runner) and handed in as values.
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
//
// # Prompt set
//
// golden.json also commits to its whole prompt set, so that a prompt cannot
// be dropped, added, reordered or edited without changing the record's
// identity: prompt_set is the count and
//
//	D = SHA-256("tarfa-golden-v2 prompt set\n" ‖ model root (32 bytes) ‖ u64 count ‖ P₀ ‖ P₁ ‖ …)
//	Pᵢ = SHA-256(source line) ‖ u64 max_tokens ‖ f64 temperature ‖ f64 top_p ‖ u64 top_k ‖ u64 seed ‖
//	     u64 len(stop) ‖ stop as u64 ‖ u64 len(generated) ‖ generated as u64 ‖
//	     u64 len(prompt tokens) ‖ prompt tokens as u64 ‖ c_last  (the chain head: c₀ when no step was generated)
//
// (integers little-endian, floats as IEEE-754 binary64 bits). The logits
// file's metadata repeats D, every prompt names a distinct tensor, and the
// logits file holds no other. The golden record's ID, printed by record and
// replay and cited by run reports, is "sha256:" + hex(D).
package golden

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"math"
)

// Format identifiers.
const (
	Format  = "tarfa-golden"
	Version = 2
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
	PromptSet   PromptSet      `json:"prompt_set"`
	Prompts     []PromptRecord `json:"prompts"`
}

// PromptSet commits to every prompt record (see the package comment).
type PromptSet struct {
	Count  int    `json:"count"`
	SHA256 string `json:"sha256"` // hex D
}

// ID is the golden record's identity: "sha256:" + hex(D).
func (g *Golden) ID() string { return "sha256:" + g.PromptSet.SHA256 }

// promptSetDigest computes D over g's prompt records (their chains must be
// filled in).
func promptSetDigest(root [32]byte, prompts []PromptRecord) [32]byte {
	h := sha256.New()
	h.Write([]byte("tarfa-golden-v2 prompt set\n"))
	h.Write(root[:])
	var b [8]byte
	u := func(v uint64) {
		binary.LittleEndian.PutUint64(b[:], v)
		h.Write(b[:])
	}
	ints := func(xs []int) {
		u(uint64(len(xs)))
		for _, x := range xs {
			u(uint64(x))
		}
	}
	u(uint64(len(prompts)))
	for i := range prompts {
		p := &prompts[i]
		src := sha256.Sum256([]byte(p.Source))
		h.Write(src[:])
		u(uint64(p.MaxTokens))
		u(math.Float64bits(p.Sampling.Temperature))
		u(math.Float64bits(p.Sampling.TopP))
		u(uint64(p.Sampling.TopK))
		u(p.Sampling.Seed)
		ints(p.Stop)
		ints(p.Generated)
		ints(p.PromptTokens)
		head := ChainStart(root, p.PromptTokens)
		if n := len(p.Chain); n > 0 {
			if c, err := hex.DecodeString(p.Chain[n-1]); err == nil && len(c) == 32 {
				copy(head[:], c)
			} else {
				head = [32]byte{} // an invalid chain value; Read refuses it before this matters
			}
		}
		h.Write(head[:])
	}
	var out [32]byte
	h.Sum(out[:0])
	return out
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
	writeF32(h, logits)
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// A Chainer computes ChainNext with one hasher and one buffer kept from
// call to call, where ChainNext allocates both every time: a decode loop
// that extends a chain each token allocates nothing for it. The zero
// Chainer is ready to use; it is not safe for concurrent use.
type Chainer struct {
	h   hash.Hash
	buf []byte // 16 KiB: the previous head, then the logits' bits
	sum []byte
}

// Next is ChainNext(prev, logits).
func (c *Chainer) Next(prev [32]byte, logits []float32) [32]byte {
	if c.h == nil {
		c.h, c.buf, c.sum = sha256.New(), make([]byte, 16<<10), make([]byte, 0, sha256.Size)
	} else {
		c.h.Reset()
	}
	c.h.Write(c.buf[:copy(c.buf, prev[:])])
	for v := logits; len(v) > 0; {
		n := min(len(v), len(c.buf)/4)
		for i, x := range v[:n] {
			binary.LittleEndian.PutUint32(c.buf[4*i:], math.Float32bits(x))
		}
		c.h.Write(c.buf[:4*n])
		v = v[n:]
	}
	c.sum = c.h.Sum(c.sum[:0])
	return [32]byte(c.sum)
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

// writeF32 writes v to h as little-endian float32 bits, the bytes f32Bytes
// returns, through one 16 KiB buffer instead of a copy of the whole row (a
// decode step of a 248 320-entry vocabulary allocated 1 MB).
func writeF32(h hash.Hash, v []float32) {
	var buf [16 << 10]byte
	for len(v) > 0 {
		n := min(len(v), len(buf)/4)
		for i, x := range v[:n] {
			binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(x))
		}
		h.Write(buf[:4*n])
		v = v[n:]
	}
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
