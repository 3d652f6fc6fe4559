// Package jnf implements JNF v1, Tarfa's on-disk model format; SPEC.md in
// this directory is the normative description.
//
// # Directory
//
// global.jnf holds the global tensors, layer-NNNNN.jnf one decoder layer (its
// non-expert tensors, then its routed experts), beside copies of config.json
// and the tokenizer files and a manifest.json (package verify).
//
// # File
//
//	[64-byte preamble: "TARFAJNF", u32 version 1, u32 flags 0, u64 table offset 64,
//	 u64 table length T, SHA-256 of the table]
//	[T bytes of JSON record table][zero padding to 4096]
//	[record 0][zero padding to 4096][record 1]…
//
// Every routed expert is one record holding its gate, up and down projection
// bytes exactly as in the source checkpoint, starting on a 4096-byte
// boundary, so that it can be read with O_DIRECT in one request. Each record
// carries SHA-256 and BLAKE3 digests; the reader hands out a record's bytes
// only together with them (RecordBytes), and only package attest turns them
// into the verified types the engine accepts. See ../EXACTNESS.md for what the
// engine then does with the bytes.
package jnf
