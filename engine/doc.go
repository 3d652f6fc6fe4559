// Package engine runs the text models Tarfa supports, qwen3_moe (Qwen3-MoE)
// and qwen3_5_moe (the Qwen3.5-MoE text tower with Gated DeltaNet layers),
// exactly as ../shared/MODEL_SPEC.md describes, in fp32 arithmetic on the
// exact BF16/F32 weights with the canonical reduction order of EXACTNESS.md.
//
// # API
//
//	ck, err := weights.Open(ctx, dir)
//	m, err := engine.Load(ck, engine.Options{Threads: 0})
//	s := m.NewSession()
//	logits, err := s.Forward(tokens, all)        // [][]float32, one row per new position (all) or the last
//	res, err := engine.Generate(ctx, s, prompt, engine.GenOptions{MaxTokens: 64, Stop: cfg.EOS}, onToken)
//	st := m.Stats()                              // tokens, expert evaluations per layer, ...
//
// Load takes an opened *weights.Checkpoint: its configuration and its
// weights. It fetches every non-expert tensor once and checks its shape and
// dtype. Routed experts are fetched from the checkpoint when a token is
// routed to them, and are checked every time. The engine gets weight bytes
// only as weights.VerifiedTensor and weights.VerifiedExpert, which only a
// checkpoint mints, and it checks that each is the one it asked for (name,
// expert ID) and comes from the checkpoint it was loaded from (root).
// The engine keeps no routed expert: Options.Experts (a tier.Hierarchy,
// constructed by the caller) keeps verified experts resident and scrubs
// them; without it every use reads and verifies the expert again.
// Model.Scrub re-hashes the non-expert tensors the model keeps resident.
//
// A Session owns one sequence: the KV cache of full-attention layers and the
// conv and recurrent state of Gated DeltaNet layers. Forward appends tokens.
// Feeding a sequence in one call, token by token or in any chunks gives
// bit-identical logits, and so does any Options.Threads. Token ids outside
// the vocabulary, an empty call, or more positions than the model supports
// are errors that leave the session unchanged. An error inside the model
// (such as a failed expert fetch) makes the session unusable until Reset.
//
// Generate is greedy (temperature 0: argmax, ties to the lowest id) or
// samples with a fixed, documented procedure (temperature, top-k, top-p,
// math/rand/v2 PCG seeded with GenOptions.Seed). The same seed gives the
// same tokens on every machine.
//
// Stats.ExpertEvals counts routed-expert evaluations where they happen. For
// every MoE layer it equals num_experts_per_tok × tokens processed, and the
// engine returns an error if any token of a layer were evaluated with a
// different number of experts.
//
// # Structure
//
// The model code in this package is written once against backend.Backend
// and backend.Queue (backend): activations, KV cache and DeltaNet
// state live in backend buffers, operations (matmul over BF16/F32 weights,
// norms, RoPE, attention, conv, DeltaNet recurrence, activations, routing)
// are enqueued, and the host waits once per MoE layer, for the router's
// choices, and once per step, for the logits. backend/cpu is the pure-Go
// reference implementation, backend/cuda the CUDA one, backend/backendtest
// the suite both pass. Backends register themselves (backend.Register) and
// OpenBackend opens them by name, so this package imports no device
// backend: the program's composition root (runner) links them. The default
// backend and the host side beside a device (the experts computed on the
// CPU) are the registered "cpu" backend, a backend.Host. Routed experts arrive
// through the seam of package expertstream (ExpertSource), which the tier
// implements without importing the engine. canon holds the
// scalar definitions that every backend must reproduce bit for bit
// (reduction order, exp/sigmoid/silu/softplus, RoPE table, torch's top-k
// order). With a device backend, routed experts resident in its memory are
// computed there; the others are computed on the device or on the host
// (Options.Placement), with the same bits either way. Batch steps several
// sessions at once (continuous batching), bit-identical to solo runs.
package engine
