package attest

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing/fstest"

	"github.com/tarfa-ai/tarfa/jnf"
)

// AuxFile reads one auxiliary file of the model directory (config,
// tokenizer, chat template: the manifest's "file" entries) and returns its
// bytes only if they hash to the manifest's SHA-256 for it. A file the
// manifest does not list does not exist (fs.ErrNotExist).
func (m *Model) AuxFile(name string) ([]byte, error) {
	i, ok := m.Manifest.Index(name)
	if !ok || m.Manifest.Entries[i].Kind != jnf.KindFile {
		return nil, fmt.Errorf("model %s: %s: %w (not in the manifest)", m.Dir, name, fs.ErrNotExist)
	}
	e := &m.Manifest.Entries[i]
	b, err := os.ReadFile(filepath.Join(m.Dir, e.File))
	if err != nil {
		return nil, err
	}
	want, err := jnf.ParseHex(jnf.SHA256, e.SHA256)
	if err != nil {
		return nil, err
	}
	if got := jnf.SHA256Bytes(b); !got.Equal(want) {
		return nil, &jnf.MismatchError{What: fmt.Sprintf("model %s: %s", m.Dir, name), Got: got, Want: want}
	}
	return b, nil
}

// AuxFS is a read-only file system of every auxiliary file, each read once
// and verified against the manifest now. Loaders (the tokenizer, the chat
// template) read from it, so what they parse is what the root attests.
func (m *Model) AuxFS() (fs.FS, error) {
	out := fstest.MapFS{}
	for _, e := range m.Manifest.Entries {
		if e.Kind != jnf.KindFile {
			continue
		}
		b, err := m.AuxFile(e.Name)
		if err != nil {
			return nil, err
		}
		out[e.Name] = &fstest.MapFile{Data: b, Mode: 0o444}
	}
	return out, nil
}
