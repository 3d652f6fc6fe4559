package verify

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/jnf/hf"
)

// ManifestFile is the manifest's name inside a JNF directory.
const ManifestFile = "manifest.json"

// Manifest format identifiers.
const (
	ManifestFormat  = "tarfa-jnf-manifest"
	ManifestVersion = 1
)

// Entry is one leaf of the manifest: an auxiliary file, a tensor or an expert
// record. Tensor and expert entries are their record-table records plus the
// JNF file holding them; a file entry has kind "file", layer and expert −1,
// offset 0 and the file's length and digests.
type Entry struct {
	jnf.Record
	File string `json:"file"` // relative to the directory
}

// Manifest describes a JNF directory completely. Its roots are recomputed
// from the entries by every reader; they are never trusted as stored.
type Manifest struct {
	Format       string           `json:"format"`
	Version      int              `json:"version"`
	Arch         string           `json:"arch"`
	ModelType    string           `json:"model_type"`
	Layout       string           `json:"layout,omitempty"`
	Layers       int              `json:"layers"`         // num_hidden_layers of the model
	LayersHeld   []int            `json:"layers_present"` // layers converted so far
	Complete     bool             `json:"complete"`       // every layer and the global tensors are present
	Root         string           `json:"root"`           // hex SHA-256 Merkle root over all entries (full leaves)
	WeightsRoot  string           `json:"weights_root"`   // hex SHA-256 Merkle root over tensor+expert content leaves
	ConfigSHA256 string           `json:"config_sha256"`
	Sources      []jnf.SourceFile `json:"sources"`
	Ignored      []jnf.Ignored    `json:"ignored,omitempty"`
	Entries      []Entry          `json:"entries"`
}

// ContentLeaf is the leaf text that identifies an entry's content
// independently of where its bytes live (see SPEC.md "Leaves").
func (e *Entry) ContentLeaf() []byte {
	var b strings.Builder
	b.WriteString("tarfa-jnf-v1 content\n")
	b.WriteString("kind=" + e.Kind + "\n")
	b.WriteString("name=" + e.Name + "\n")
	b.WriteString("layout=" + e.layoutString() + "\n")
	b.WriteString("length=" + strconv.FormatInt(e.Length, 10) + "\n")
	b.WriteString("sha256=" + e.SHA256 + "\n")
	b.WriteString("blake3=" + e.BLAKE3 + "\n")
	return []byte(b.String())
}

// FullLeaf is the content leaf followed by the provenance of the bytes.
func (e *Entry) FullLeaf() []byte {
	var b strings.Builder
	b.Write(e.ContentLeaf())
	b.WriteString("file=" + e.File + "\n")
	b.WriteString("offset=" + strconv.FormatInt(e.Offset, 10) + "\n")
	var src []string
	for _, s := range e.SourceRanges() {
		src = append(src, fmt.Sprintf("%s:%d+%d", s.File, s.Offset, s.Length))
	}
	b.WriteString("source=" + strings.Join(src, ";") + "\n")
	return []byte(b.String())
}

func shapeString(s []int64) string {
	p := make([]string, len(s))
	for i, d := range s {
		p[i] = strconv.FormatInt(d, 10)
	}
	return "[" + strings.Join(p, ",") + "]"
}

func (e *Entry) layoutString() string {
	switch e.Kind {
	case jnf.KindTensor:
		return string(e.DType) + shapeString(e.Shape)
	case jnf.KindExpert:
		p := make([]string, len(e.Parts))
		for i, part := range e.Parts {
			p[i] = part.Name + ":" + string(part.DType) + shapeString(part.Shape)
		}
		return strings.Join(p, ";")
	}
	return ""
}

// LeafHashes returns the RFC 6962 leaf hashes of the full leaves, in entry order.
func (m *Manifest) LeafHashes() [][32]byte {
	out := make([][32]byte, len(m.Entries))
	for i := range m.Entries {
		out[i] = LeafHash(m.Entries[i].FullLeaf())
	}
	return out
}

// ComputeRoots recomputes both roots from the entries.
func (m *Manifest) ComputeRoots() (root, weights [32]byte) {
	root = RootFromLeafHashes(m.LeafHashes())
	var wl [][32]byte
	for i := range m.Entries {
		if m.Entries[i].Kind != jnf.KindFile {
			wl = append(wl, LeafHash(m.Entries[i].ContentLeaf()))
		}
	}
	return root, RootFromLeafHashes(wl)
}

// RootDigest is the manifest root as a Digest.
func (m *Manifest) RootDigest() (jnf.Digest, error) { return jnf.ParseHex(jnf.SHA256, m.Root) }

// Index finds the entry index of a name.
func (m *Manifest) Index(name string) (int, bool) {
	for i := range m.Entries {
		if m.Entries[i].Name == name {
			return i, true
		}
	}
	return -1, false
}

// Encode serialises the manifest (indented, deterministic).
func (m *Manifest) Encode() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", " ")
	if err := enc.Encode(m); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Write writes DIR/manifest.json atomically.
func (m *Manifest) Write(dir string) error {
	b, err := m.Encode()
	if err != nil {
		return err
	}
	return jnf.WriteFileAtomic(filepath.Join(dir, ManifestFile), b, 0o644)
}

// LoadManifest reads DIR/manifest.json strictly and checks that its stored
// roots equal the roots recomputed from its entries.
func LoadManifest(dir string) (*Manifest, []byte, error) {
	path := filepath.Join(dir, ManifestFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return nil, nil, notJNF(dir, err)
	}
	if err != nil {
		return nil, nil, err
	}
	m, err := ParseManifest(b)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, b, nil
}

// NotJNFError is LoadManifest's error for a directory without manifest.json
// (or a path that is no directory): a usage error, not a failed check.
type NotJNFError struct {
	Dir    string
	Reason string // what the directory is instead, for people
	Err    error  // from reading manifest.json
}

func (e *NotJNFError) Error() string { return e.Reason }
func (e *NotJNFError) Unwrap() error { return e.Err }

func notJNF(dir string, err error) *NotJNFError {
	e := &NotJNFError{Dir: dir, Err: err}
	st, serr := os.Stat(dir)
	switch {
	case serr != nil:
		e.Reason = fmt.Sprintf("model directory %s: %v", dir, serr)
	case !st.IsDir():
		e.Reason = fmt.Sprintf("model directory %s is a file, not a directory", dir)
	default:
		e.Reason = fmt.Sprintf("%s is not a JNF directory: %v (tarfa convert writes one)", dir, err)
		for _, f := range []string{"model.safetensors.index.json", "model.safetensors"} {
			if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
				e.Reason = fmt.Sprintf("%s is a Hugging Face checkpoint, not a JNF directory: convert it first (tarfa convert %s --out DIR)", dir, dir)
				break
			}
		}
	}
	return e
}

// ParseManifest parses and self-checks manifest bytes.
func ParseManifest(b []byte) (*Manifest, error) {
	var m Manifest
	if err := jnf.DecodeJSON(b, &m); err != nil {
		return nil, fmt.Errorf("manifest: %v", err)
	}
	if m.Format != ManifestFormat || m.Version != ManifestVersion {
		return nil, fmt.Errorf("manifest format %q version %d, want %q version %d", m.Format, m.Version, ManifestFormat, ManifestVersion)
	}
	seen := map[string]bool{}
	for i := range m.Entries {
		e := &m.Entries[i]
		if seen[e.Name] {
			return nil, fmt.Errorf("manifest: entry %q appears twice", e.Name)
		}
		seen[e.Name] = true
		if _, err := e.Digests(); err != nil {
			return nil, fmt.Errorf("manifest: %w", err)
		}
		if e.File == "" || filepath.IsAbs(e.File) || strings.Contains(e.File, "..") || strings.ContainsAny(e.File, `/\`) {
			return nil, fmt.Errorf("manifest: entry %q: invalid file %q", e.Name, e.File)
		}
		if e.Offset < 0 || e.Length < 0 {
			return nil, fmt.Errorf("manifest: entry %q: negative offset or length", e.Name)
		}
	}
	root, weights := m.ComputeRoots()
	if got := hex.EncodeToString(root[:]); got != m.Root {
		return nil, fmt.Errorf("manifest root mismatch: entries hash to %s, the manifest says %s (manifest edited?)", got, m.Root)
	}
	if got := hex.EncodeToString(weights[:]); got != m.WeightsRoot {
		return nil, fmt.Errorf("manifest weights_root mismatch: entries hash to %s, the manifest says %s (manifest edited?)", got, m.WeightsRoot)
	}
	return &m, nil
}

// Build derives the manifest of DIR from its JNF files' record tables and
// auxiliary files. It checks structure (every table valid, every table made
// from DIR's config.json, canonical record order) but does not re-read record
// data; Check does that.
func Build(dir string) (*Manifest, error) {
	cfgBytes, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("JNF directory %s: %w", dir, err)
	}
	cfg, err := hf.ParseConfig(cfgBytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "config.json"), err)
	}
	cfgSum := jnf.SHA256Bytes(cfgBytes).Hex()
	m := &Manifest{Format: ManifestFormat, Version: ManifestVersion, Arch: string(cfg.Arch), ModelType: cfg.ModelType,
		Layers: cfg.Layers, ConfigSHA256: cfgSum, LayersHeld: []int{}}

	// Auxiliary files first, by name.
	for _, a := range hf.AuxFiles {
		p := filepath.Join(dir, a)
		f, err := os.Open(p)
		if os.IsNotExist(err) {
			continue
		} else if err != nil {
			return nil, err
		}
		d, n, err := jnf.SumReader(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		m.Entries = append(m.Entries, Entry{File: a, Record: jnf.Record{Kind: jnf.KindFile, Name: a, Layer: -1, Expert: -1,
			Length: n, SHA256: d.SHA256.Hex(), BLAKE3: d.BLAKE3.Hex()}})
	}
	sort.Slice(m.Entries, func(i, j int) bool { return m.Entries[i].Name < m.Entries[j].Name })

	sources := map[string]jnf.SourceFile{}
	haveGlobal := false
	for l := -1; l < cfg.Layers; l++ {
		p := filepath.Join(dir, jnf.FileName(l))
		f, err := jnf.OpenFile(p)
		if os.IsNotExist(err) {
			continue
		} else if err != nil {
			return nil, err
		}
		t := f.Table
		f.Close()
		if t.ConfigSHA256 != cfgSum {
			return nil, fmt.Errorf("%s was converted from a different config.json (config_sha256 %s, the directory's is %s)", p, t.ConfigSHA256, cfgSum)
		}
		if err := checkOrder(&t); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if l < 0 {
			haveGlobal = true
			m.Layout, m.Ignored = t.Layout, t.Ignored
		} else {
			m.LayersHeld = append(m.LayersHeld, l)
		}
		for _, s := range t.Sources {
			if prev, ok := sources[s.File]; ok && prev != s {
				return nil, fmt.Errorf("%s: source %s recorded as size %d sha256 %s, another file recorded size %d sha256 %s (converted from a different checkpoint?)", p, s.File, s.Size, s.SHA256, prev.Size, prev.SHA256)
			}
			sources[s.File] = s
		}
		for _, r := range t.Records {
			m.Entries = append(m.Entries, Entry{Record: r, File: t.File})
		}
	}
	for _, s := range sources {
		m.Sources = append(m.Sources, s)
	}
	sort.Slice(m.Sources, func(i, j int) bool { return m.Sources[i].File < m.Sources[j].File })
	m.Complete = haveGlobal && len(m.LayersHeld) == cfg.Layers
	root, weights := m.ComputeRoots()
	m.Root, m.WeightsRoot = hex.EncodeToString(root[:]), hex.EncodeToString(weights[:])
	return m, nil
}

// checkOrder enforces the canonical record order of a table: tensors by name,
// then experts by index.
func checkOrder(t *jnf.Table) error {
	sawExpert, prevName, prevExpert := false, "", -1
	for _, r := range t.Records {
		switch r.Kind {
		case jnf.KindTensor:
			if sawExpert {
				return fmt.Errorf("tensor record %s after expert records", r.Name)
			}
			if r.Name <= prevName {
				return fmt.Errorf("tensor record %s out of order (after %s)", r.Name, prevName)
			}
			prevName = r.Name
		case jnf.KindExpert:
			sawExpert = true
			if r.Expert <= prevExpert {
				return fmt.Errorf("expert record %d out of order (after %d)", r.Expert, prevExpert)
			}
			if r.Name != hf.ExpertName(r.Layer, r.Expert) {
				return fmt.Errorf("expert record named %q, want %q", r.Name, hf.ExpertName(r.Layer, r.Expert))
			}
			prevExpert = r.Expert
		}
	}
	return nil
}
