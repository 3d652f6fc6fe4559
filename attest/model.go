package attest

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/jnf/hf"
	"github.com/tarfa-ai/tarfa/verify"
)

// Model is a converted JNF directory opened for inference. Every byte it
// hands out has just been hashed and matched against the manifest, whose
// root was recomputed from its entries and re-derived from the files'
// record tables when the model was opened.
type Model struct {
	Dir      string
	Manifest *verify.Manifest
	Config   *hf.Config
	// ConfigBytes are the exact bytes of config.json that the manifest hashes.
	ConfigBytes []byte

	mu      sync.Mutex
	files   map[string]*jnf.File
	records map[string]recordRef // canonical name → location
	// Served counts records handed out, by kind (for reports).
	served map[string]int
}

type recordRef struct {
	file  *jnf.File
	index int
	entry *verify.Entry
}

// Open opens dir, checks the manifest against itself and against the files'
// record tables and auxiliary files, and requires a complete model.
func Open(dir string) (*Model, error) {
	man, _, err := verify.LoadManifest(dir)
	if err != nil {
		return nil, err
	}
	if !man.Complete {
		return nil, fmt.Errorf("model %s is incomplete: layers present %v of %d (finish `tarfa convert --layers`)", dir, man.LayersHeld, man.Layers)
	}
	built, err := verify.Build(dir)
	if err != nil {
		return nil, err
	}
	if built.Root != man.Root {
		return nil, fmt.Errorf("model %s: the files' record tables and auxiliary files hash to root %s, the manifest says %s (run `tarfa verify %s`)", dir, built.Root, man.Root, dir)
	}
	cfgBytes, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	i, ok := man.Index("config.json")
	if !ok {
		return nil, fmt.Errorf("model %s: manifest has no config.json entry", dir)
	}
	if got := jnf.SHA256Bytes(cfgBytes).Hex(); got != man.Entries[i].SHA256 {
		return nil, fmt.Errorf("model %s: config.json changed while opening (sha256 %s, manifest %s)", dir, got, man.Entries[i].SHA256)
	}
	cfg, err := hf.ParseConfig(cfgBytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "config.json"), err)
	}
	m := &Model{Dir: dir, Manifest: man, Config: cfg, ConfigBytes: cfgBytes,
		files: map[string]*jnf.File{}, records: map[string]recordRef{}, served: map[string]int{}}
	for i := range man.Entries {
		e := &man.Entries[i]
		if e.Kind == jnf.KindFile {
			continue
		}
		f, ok := m.files[e.File]
		if !ok {
			if f, err = jnf.OpenFile(filepath.Join(dir, e.File)); err != nil {
				m.Close()
				return nil, err
			}
			m.files[e.File] = f
		}
		idx := -1
		for j := range f.Table.Records {
			if f.Table.Records[j].Name == e.Name {
				idx = j
				break
			}
		}
		if idx < 0 || !sameDigests(&f.Table.Records[idx], e) {
			m.Close()
			return nil, fmt.Errorf("model %s: %s: manifest entry does not match the record table of %s", dir, e.Name, e.File)
		}
		m.records[e.Name] = recordRef{file: f, index: idx, entry: e}
	}
	return m, nil
}

// sameDigests reports whether a record table entry places and hashes the
// bytes as the manifest entry does.
func sameDigests(r *jnf.Record, e *verify.Entry) bool {
	return r.Offset == e.Offset && r.Length == e.Length && r.SHA256 == e.SHA256 && r.BLAKE3 == e.BLAKE3
}

// Close closes the JNF files.
func (m *Model) Close() error {
	for _, f := range m.files {
		f.Close()
	}
	return nil
}

// Root is the manifest root.
func (m *Model) Root() jnf.Digest {
	d, _ := m.Manifest.RootDigest()
	return d
}

// Served returns how many tensors and experts were handed out.
func (m *Model) Served() (tensors, experts int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.served[jnf.KindTensor], m.served[jnf.KindExpert]
}

func (m *Model) read(name, kind string) (jnf.RecordBytes, error) {
	ref, ok := m.records[name]
	if !ok || ref.entry.Kind != kind {
		return jnf.RecordBytes{}, fmt.Errorf("model %s: no %s %q in the manifest", m.Dir, kind, name)
	}
	rb, err := ref.file.ReadRecord(ref.index, nil)
	if err != nil {
		return jnf.RecordBytes{}, err
	}
	m.mu.Lock()
	m.served[kind]++
	m.mu.Unlock()
	return rb, nil
}

// Tensor reads a non-expert tensor by canonical name and verifies it.
func (m *Model) Tensor(name string) (VerifiedTensor, error) {
	rb, err := m.read(name, jnf.KindTensor)
	if err != nil {
		return VerifiedTensor{}, err
	}
	v := rb.Views()[0]
	t, err := VerifyTensor(v, rb.Data, rb.Want.BLAKE3)
	if err != nil {
		return VerifiedTensor{}, fmt.Errorf("%s@%d: %w", m.records[name].file.Name, rb.Record.Offset, err)
	}
	return t, nil
}

// Expert reads routed expert e of layer l and verifies it.
func (m *Model) Expert(layer, expert int) (*VerifiedExpert, error) {
	rb, err := m.read(hf.ExpertName(layer, expert), jnf.KindExpert)
	if err != nil {
		return nil, err
	}
	v := rb.Views()
	ve, err := VerifyExpert(ExpertID{layer, expert}, rb.Data, v[0], v[1], v[2], rb.Want.BLAKE3)
	if err != nil {
		return nil, fmt.Errorf("%s@%d: %w", m.records[rb.Record.Name].file.Name, rb.Record.Offset, err)
	}
	return ve, nil
}
