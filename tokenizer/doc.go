// Package tokenizer loads Hugging Face tokenizer.json byte-level BPE
// tokenizers of the Qwen2/Qwen3 family and their Jinja chat templates, and
// produces the same ids, text and renderings as Hugging Face tokenizers
// 0.23 / transformers 5.17, byte for byte.
//
// # Encoding
//
// Load or Parse a tokenizer, then Encode: added tokens (special or not) are
// cut out of the raw text first, the rest is NFC-normalised (with the Unicode
// 9.0 data of tokenizers), split by the Qwen pattern (QwenPattern, a
// hand-written scanner with Oniguruma's Unicode 16.0 classes), spelled in the
// GPT-2 byte-level alphabet and merged by BPE rank.
//
// # Decoding
//
// Decode concatenates token bytes and replaces invalid UTF-8 as Rust's
// from_utf8_lossy does. A StreamDecoder emits text while ids arrive and
// holds back a character split across tokens until it is complete. Ids that
// no token has are an *IDError, never skipped.
//
// # Chat templates
//
// ChatTemplate renders tokenizer_config.json's "chat_template" (or
// chat_template.jinja) with a Jinja2 interpreter that follows Python's
// semantics and transformers' environment (trim_blocks, lstrip_blocks,
// tojson as json.dumps with insertion order).
//
// # Synthetic tokenizers
//
// SyntheticFiles makes a small deterministic tokenizer in the same format for
// synthetic models, with the Qwen3 special tokens at the top of the
// vocabulary and the Qwen3 chat template.
//
// # Bounds
//
// The files come with models from strangers, so loading is bounded by what
// they hold: regular files of at most jnf.MaxAuxFileSize bytes, ids below
// the number of tokens plus 1024 (and below LoadOptions.ModelVocab when the
// caller knows the model's vocabulary), added tokens of bounded size. A chat
// template renders within a budget of bytes, steps and nesting, and an error
// names the limit it exceeded.
//
// See docs/tokenizer.md for the pipeline, the bounds, what is not supported
// and how parity with Hugging Face is tested. A Tokenizer and a ChatTemplate
// are safe for concurrent use; a StreamDecoder is not.
package tokenizer
