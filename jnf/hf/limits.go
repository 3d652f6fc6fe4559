package hf

import "math/bits"

// Limits on config.json. A config.json comes with a checkpoint from a
// stranger, and every count and dimension in it sizes something Tarfa
// allocates or computes (per-layer tables, per-expert maps, tensor shapes,
// byte offsets), so ParseConfig refuses any value beyond these bounds before
// anything is allocated from it. Each bound is far above every released MoE
// (figures of the largest ones in parentheses) and small enough that every
// product Tarfa forms from accepted values is checked with checkedProduct
// and then fits an int64. SPEC.md §9 lists them.
const (
	// MaxLayers bounds num_hidden_layers (94 in Qwen3-235B-A22B).
	MaxLayers = 1024
	// MaxExperts bounds num_experts per MoE layer (512 in Qwen3.5-397B-A17B).
	MaxExperts = 1 << 16
	// MaxRoutedExperts bounds the routed experts of the whole model, MoE
	// layers × num_experts (about 31 thousand in the largest releases). Each
	// becomes one manifest entry of about 1.2 KB, so a model at this bound
	// still has a manifest within jnf.MaxManifestSize.
	MaxRoutedExperts = 1 << 16
	// MaxHidden bounds hidden_size (7168 in DeepSeek-V3).
	MaxHidden = 1 << 16
	// MaxVocab bounds vocab_size (248,320 in Qwen3.5).
	MaxVocab = 1 << 24
	// MaxHeads bounds num_attention_heads, num_key_value_heads and the
	// Gated DeltaNet linear_num_key_heads and linear_num_value_heads (128).
	MaxHeads = 1024
	// MaxHeadDim bounds head_dim, linear_key_head_dim and
	// linear_value_head_dim (256).
	MaxHeadDim = 4096
	// MaxIntermediate bounds moe_intermediate_size,
	// shared_expert_intermediate_size and intermediate_size (29,568 for the
	// dense MLP of the largest models).
	MaxIntermediate = 1 << 20
	// MaxConvKernel bounds linear_conv_kernel_dim (4).
	MaxConvKernel = 64
	// MaxPositions bounds max_position_embeddings (10M in Llama 4 Scout).
	MaxPositions = 1 << 30
)

// maxDTypeSize is the largest element size of a float dtype a checkpoint
// may use (F32), for the byte bounds ParseConfig derives before it knows
// the dtypes.
const maxDTypeSize = 4

// mulInt64 returns a·b and true, or 0 and false if either is negative or the
// product overflows an int64.
func mulInt64(a, b int64) (int64, bool) {
	if a < 0 || b < 0 {
		return 0, false
	}
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > 1<<63-1 {
		return 0, false
	}
	return int64(lo), true
}

// addInt64 returns a+b and true, or 0 and false if either is negative or the
// sum overflows an int64.
func addInt64(a, b int64) (int64, bool) {
	if a < 0 || b < 0 || a > 1<<63-1-b {
		return 0, false
	}
	return a + b, true
}

// checkedProduct is the product of dims, with false if any is negative or
// the product overflows an int64. Every size jnf/hf derives from config
// values (shapes, bytes per expert, offsets into fused tensors, totals) is
// formed with it.
func checkedProduct(dims ...int64) (int64, bool) {
	p := int64(1)
	for _, d := range dims {
		var ok bool
		if p, ok = mulInt64(p, d); !ok {
			return 0, false
		}
	}
	return p, true
}
