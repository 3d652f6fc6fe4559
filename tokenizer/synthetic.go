package tokenizer

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"

	"golang.org/x/text/unicode/norm"
)

// qwen3ChatTemplate is the chat template of the Qwen3 tokenizer_config.json,
// byte for byte. SyntheticFiles ships it.
//
//go:embed qwen3_chat_template.jinja
var qwen3ChatTemplate string

//go:embed synthetic_corpus.txt
var syntheticCorpus string

// MinSyntheticVocab is the smallest vocabulary SyntheticFiles accepts: the
// 256 byte tokens, the 5 special tokens and a few merges.
const MinSyntheticVocab = 300

// syntheticSpecialTokens are the added tokens of a synthetic tokenizer, in
// id order: with vocabulary size V, "<|endoftext|>" has id V-5 and "</think>"
// id V-1. The first three are special (as in Qwen3); <think> and </think>
// are plain added tokens (as in Qwen3).
var syntheticSpecialTokens = [5]string{"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"}

// SyntheticFiles returns a small but real byte-level BPE tokenizer in the
// Hugging Face format of Qwen3 (tokenizer.json with NFC, the Qwen Split
// pattern, ByteLevel, BPE; tokenizer_config.json with the Qwen3 chat
// template and eos_token "<|im_end|>"), whose ids are exactly 0..vocabSize-1:
//
//   - 0..255: the 256 byte tokens, in GPT-2 / Qwen byte order;
//   - 256..vocabSize-6: merges learned by BPE on a built-in English corpus
//     (synthetic_corpus.txt; most frequent pair first, ties to the smaller
//     pair of ids) until every corpus word is one token, then, for larger
//     vocabularies, merges of byte pairs in id order;
//   - vocabSize-5..vocabSize-1: the added tokens "<|endoftext|>",
//     "<|im_start|>", "<|im_end|>" (special, and the eos_token), "<think>",
//     "</think>" (not special, as in Qwen3).
//
// The output depends only on vocabSize. vocabSize must be at least
// MinSyntheticVocab.
func SyntheticFiles(vocabSize int) (tokenizerJSON, tokenizerConfigJSON []byte, err error) {
	if vocabSize < MinSyntheticVocab {
		return nil, nil, fmt.Errorf("tokenizer: synthetic vocabulary size %d is below the minimum %d (256 bytes + 5 special tokens + merges)", vocabSize, MinSyntheticVocab)
	}
	if vocabSize > 1<<20 {
		return nil, nil, fmt.Errorf("tokenizer: synthetic vocabulary size %d is above the maximum %d", vocabSize, 1<<20)
	}
	nModel := vocabSize - len(syntheticSpecialTokens)
	tokens, merges := trainBPE(syntheticCorpus, nModel)
	if len(tokens) != nModel {
		return nil, nil, fmt.Errorf("tokenizer: synthetic vocabulary: made %d model tokens, want %d", len(tokens), nModel)
	}
	return syntheticTokenizerJSON(tokens, merges), syntheticConfigJSON(nModel), nil
}

// trainBPE learns merges until the vocabulary has n tokens. tokens are
// byte-level spellings indexed by id; merges are pairs of ids in rank order.
func trainBPE(corpus string, n int) ([]string, [][2]int32) {
	tokens := make([]string, 0, n)
	vocab := make(map[string]int32, n)
	for _, b := range byteOrder {
		vocab[string(byteToRune[b])] = int32(len(tokens))
		tokens = append(tokens, string(byteToRune[b]))
	}
	var byteID [256]int32
	for i, b := range byteOrder {
		byteID[b] = int32(i)
	}

	// Words of the corpus as the tokenizer will see them, with counts, in
	// first-seen order (for determinism).
	counts := map[string]int{}
	var order []string
	text := norm.NFC.String(corpus)
	for i := 0; i < len(text); {
		j := qwenNext(text, i)
		w := text[i:j]
		if counts[w] == 0 {
			order = append(order, w)
		}
		counts[w]++
		i = j
	}
	words := make([][]int32, len(order))
	freq := make([]int, len(order))
	for k, w := range order {
		for i := 0; i < len(w); i++ {
			words[k] = append(words[k], byteID[w[i]])
		}
		freq[k] = counts[w]
	}

	var merges [][2]int32
	addMerge := func(a, b int32) int32 {
		s := tokens[a] + tokens[b]
		id, ok := vocab[s]
		if !ok {
			id = int32(len(tokens))
			vocab[s] = id
			tokens = append(tokens, s)
		}
		merges = append(merges, [2]int32{a, b})
		return id
	}
	merged := map[[2]int32]bool{}
	for len(tokens) < n {
		pairCount := map[[2]int32]int{}
		for k, w := range words {
			for i := 0; i+1 < len(w); i++ {
				pairCount[[2]int32{w[i], w[i+1]}] += freq[k]
			}
		}
		best, bestCount := [2]int32{}, 0
		for p, c := range pairCount {
			if c > bestCount || c == bestCount && (p[0] < best[0] || p[0] == best[0] && p[1] < best[1]) {
				best, bestCount = p, c
			}
		}
		if bestCount == 0 {
			break // every word is one token
		}
		id := addMerge(best[0], best[1])
		merged[best] = true
		for k, w := range words {
			out := w[:0]
			for i := 0; i < len(w); i++ {
				if i+1 < len(w) && w[i] == best[0] && w[i+1] == best[1] {
					out = append(out, id)
					i++
					continue
				}
				out = append(out, w[i])
			}
			words[k] = out
		}
	}
	// The corpus is exhausted: fill with merges of a token and a byte token,
	// tokens in id order (the bytes first), which never runs out: each
	// merge makes a longer token that later rounds extend in turn. This is
	// how the real-shape presets (vocabularies of 150k-250k) get a tokenizer.
	for a := int32(0); int(a) < len(tokens) && len(tokens) < n; a++ {
		for b := int32(0); b < 256 && len(tokens) < n; b++ {
			if _, ok := vocab[tokens[a]+tokens[b]]; !ok && !merged[[2]int32{a, b}] {
				addMerge(a, b)
			}
		}
	}
	return tokens, merges
}

// jsonString writes s as a JSON string without HTML escaping.
func jsonString(buf *bytes.Buffer, s string) {
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)           // cannot fail for a string
	buf.Truncate(buf.Len() - 1) // Encode's newline
}

func syntheticTokenizerJSON(tokens []string, merges [][2]int32) []byte {
	var b bytes.Buffer
	b.WriteString("{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [")
	for i, s := range syntheticSpecialTokens {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "\n    {\"id\": %d, \"content\": ", len(tokens)+i)
		jsonString(&b, s)
		fmt.Fprintf(&b, ", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, \"special\": %v}", i < 3)
	}
	b.WriteString("\n  ],\n  \"normalizer\": {\"type\": \"NFC\"},\n  \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": ")
	jsonString(&b, QwenPattern)
	b.WriteString("}, \"behavior\": \"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": false, \"use_regex\": false}]},\n")
	b.WriteString("  \"post_processor\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": false, \"use_regex\": false},\n")
	b.WriteString("  \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": false, \"use_regex\": false},\n")
	b.WriteString("  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n    \"unk_token\": null,\n    \"continuing_subword_prefix\": \"\",\n    \"end_of_word_suffix\": \"\",\n    \"fuse_unk\": false,\n    \"byte_fallback\": false,\n    \"ignore_merges\": false,\n    \"vocab\": {")
	for id, s := range tokens {
		if id > 0 {
			b.WriteString(",")
		}
		b.WriteString("\n      ")
		jsonString(&b, s)
		fmt.Fprintf(&b, ": %d", id)
	}
	b.WriteString("\n    },\n    \"merges\": [")
	for i, m := range merges {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("\n      [")
		jsonString(&b, tokens[m[0]])
		b.WriteString(", ")
		jsonString(&b, tokens[m[1]])
		b.WriteString("]")
	}
	b.WriteString("\n    ]\n  }\n}\n")
	return b.Bytes()
}

func syntheticConfigJSON(firstAdded int) []byte {
	var b bytes.Buffer
	b.WriteString("{\n  \"add_bos_token\": false,\n  \"add_prefix_space\": false,\n  \"added_tokens_decoder\": {")
	for i, s := range syntheticSpecialTokens {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "\n    \"%d\": {\"content\": ", firstAdded+i)
		jsonString(&b, s)
		fmt.Fprintf(&b, ", \"lstrip\": false, \"normalized\": false, \"rstrip\": false, \"single_word\": false, \"special\": %v}", i < 3)
	}
	b.WriteString("\n  },\n  \"additional_special_tokens\": [\"<|im_start|>\", \"<|im_end|>\"],\n  \"bos_token\": null,\n  \"chat_template\": ")
	jsonString(&b, qwen3ChatTemplate)
	b.WriteString(",\n  \"clean_up_tokenization_spaces\": false,\n  \"eos_token\": \"<|im_end|>\",\n  \"errors\": \"replace\",\n")
	b.WriteString("  \"model_max_length\": 131072,\n  \"pad_token\": \"<|endoftext|>\",\n  \"split_special_tokens\": false,\n  \"tokenizer_class\": \"Qwen2Tokenizer\",\n  \"unk_token\": null\n}\n")
	return b.Bytes()
}
