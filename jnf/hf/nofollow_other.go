//go:build !unix

package hf

// oNoFollow is not available here; the Lstat before the open still refuses
// a link.
const oNoFollow = 0
