package verify

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/jnf/hf"
)

// ManifestFile is the manifest's name inside a JNF directory.
const ManifestFile = "manifest.json"

// Manifest format identifiers. Version 2 commits the manifest's own fields
// (architecture, layers, sources, ignored tensors …) to the root through
// the manifest leaf (SPEC.md §5); version 1 left them uncovered and is not
// read any more (re-run tarfa convert).
const (
	ManifestFormat  = "tarfa-jnf-manifest"
	ManifestVersion = 2
)

// MaxLayers bounds num_hidden_layers as far as the manifest is concerned
// (the configuration has its own, tighter limits).
const MaxLayers = 1 << 16

// Entry is one leaf of the manifest: an auxiliary file, a tensor or an expert
// record. Tensor and expert entries are their record-table records plus the
// JNF file holding them; a file entry has kind "file", layer and expert −1,
// offset 0 and the file's length and digests.
type Entry struct {
	jnf.Record
	File string `json:"file"` // relative to the directory
}

// Manifest describes a JNF directory completely. Its roots are recomputed
// from its fields and entries by every reader; they are never trusted as
// stored. Every field is covered by the root: the entries by their leaves,
// the rest by the manifest leaf, and the derived ones (layers_present,
// complete, config_sha256) are also re-derived from the entries.
type Manifest struct {
	Format       string           `json:"format"`
	Version      int              `json:"version"`
	Arch         string           `json:"arch"`
	ModelType    string           `json:"model_type"`
	Layout       string           `json:"layout,omitempty"`
	Layers       int              `json:"layers"`         // num_hidden_layers of the model
	LayersHeld   []int            `json:"layers_present"` // layers converted so far
	Complete     bool             `json:"complete"`       // every layer and the global tensors are present
	Root         string           `json:"root"`           // hex SHA-256 Merkle root over the manifest leaf and all entries' full leaves
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

// ManifestLeaf is the leaf text of the manifest's own fields (SPEC.md §5):
// everything but the entries and the roots. Strings that are not names
// are quoted (Go syntax, strconv.Quote), so the text is unambiguous.
func (m *Manifest) ManifestLeaf() []byte {
	var b strings.Builder
	b.WriteString("tarfa-jnf-v1 manifest\n")
	fmt.Fprintf(&b, "arch=%s\n", strconv.Quote(m.Arch))
	fmt.Fprintf(&b, "model_type=%s\n", strconv.Quote(m.ModelType))
	fmt.Fprintf(&b, "layout=%s\n", strconv.Quote(m.Layout))
	fmt.Fprintf(&b, "layers=%d\n", m.Layers)
	held := make([]string, len(m.LayersHeld))
	for i, l := range m.LayersHeld {
		held[i] = strconv.Itoa(l)
	}
	fmt.Fprintf(&b, "layers_present=%s\n", strings.Join(held, ","))
	fmt.Fprintf(&b, "complete=%t\n", m.Complete)
	fmt.Fprintf(&b, "config_sha256=%s\n", m.ConfigSHA256)
	fmt.Fprintf(&b, "sources=%d\n", len(m.Sources))
	for _, s := range m.Sources {
		fmt.Fprintf(&b, "source=%s %d %s\n", s.File, s.Size, s.SHA256)
	}
	fmt.Fprintf(&b, "ignored=%d\n", len(m.Ignored))
	for _, ig := range m.Ignored {
		fmt.Fprintf(&b, "ignored=%s %d %s\n", strconv.Quote(ig.Name), ig.Bytes, strconv.Quote(ig.Reason))
	}
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

// LeafHashes returns the RFC 6962 leaf hashes of the root's leaves: the
// manifest leaf, then the entries' full leaves in entry order (entry i is
// leaf i+1).
func (m *Manifest) LeafHashes() [][32]byte {
	out := make([][32]byte, 0, len(m.Entries)+1)
	out = append(out, LeafHash(m.ManifestLeaf()))
	for i := range m.Entries {
		out = append(out, LeafHash(m.Entries[i].FullLeaf()))
	}
	return out
}

// ComputeRoots recomputes both roots from the fields and entries.
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

// LoadManifest reads DIR/manifest.json (a regular file, not a symbolic
// link, of at most jnf.MaxManifestSize bytes) strictly and checks it against itself
// (ParseManifest): its rules, its derived fields and both roots.
func LoadManifest(dir string) (*Manifest, []byte, error) {
	path := filepath.Join(dir, ManifestFile)
	b, err := jnf.ReadModelFileLimit(path, jnf.MaxManifestSize, "manifest.json")
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

// ManifestError is a manifest that breaks the rules of SPEC.md §4–5 or
// whose roots are not those of its contents. It matches
// jnf.ErrVerification.
type ManifestError struct{ Rule string }

func (e *ManifestError) Error() string        { return e.Rule }
func (e *ManifestError) Is(target error) bool { return target == jnf.ErrVerification }

// ParseManifest parses manifest bytes strictly and checks the manifest
// against itself, so that nothing it says is unchecked: every entry's
// fields (names, digests, overflow-checked shapes and lengths), the
// canonical entry order and the packing of records within each file, that
// layers_present, complete and config_sha256 are what the entries imply,
// that the sources are exactly the shards the entries draw from, and both
// roots. Whether the files say the same is Build's and Check's business.
func ParseManifest(b []byte) (*Manifest, error) {
	var m Manifest
	if err := jnf.DecodeJSON(b, &m); err != nil {
		return nil, &ManifestError{Rule: "manifest: " + err.Error()}
	}
	if m.Format != ManifestFormat || m.Version != ManifestVersion {
		rule := fmt.Sprintf("manifest format %q version %d, want %q version %d", m.Format, m.Version, ManifestFormat, ManifestVersion)
		if m.Format == ManifestFormat && m.Version == 1 {
			rule += " (written by an older Tarfa whose manifest left its own fields uncovered: convert the checkpoint again)"
		}
		return nil, &ManifestError{Rule: rule}
	}
	if err := m.check(); err != nil {
		return nil, &ManifestError{Rule: "manifest: " + err.Error()}
	}
	root, weights := m.ComputeRoots()
	if got := hex.EncodeToString(root[:]); got != m.Root {
		return nil, &ManifestError{Rule: fmt.Sprintf("manifest root mismatch: the manifest's contents hash to %s, it says %s (manifest edited?)", got, m.Root)}
	}
	if got := hex.EncodeToString(weights[:]); got != m.WeightsRoot {
		return nil, &ManifestError{Rule: fmt.Sprintf("manifest weights_root mismatch: the entries hash to %s, the manifest says %s (manifest edited?)", got, m.WeightsRoot)}
	}
	return &m, nil
}

var reLayerFile = regexp.MustCompile(`^layer-(\d{5})\.jnf$`)

// fileLayer is the layer a JNF file name holds (−1 for global.jnf).
func fileLayer(name string) (int, bool) {
	if name == jnf.FileName(-1) {
		return -1, true
	}
	sm := reLayerFile.FindStringSubmatch(name)
	if sm == nil {
		return 0, false
	}
	l, _ := strconv.Atoi(sm[1])
	return l, true
}

// check applies the rules of ParseManifest other than the roots.
func (m *Manifest) check() error {
	if m.Layers < 1 || m.Layers > MaxLayers {
		return fmt.Errorf("layers = %d, want 1 to %d", m.Layers, MaxLayers)
	}
	seen := make(map[string]bool, len(m.Entries))
	var (
		cfgSum     string
		haveGlobal bool
		held       []int
		used       = map[string]bool{}
		prevFile   = ""
		prevLayer  = -2 // layer of the file of the previous record entry
		fileStart  = -1 // index of the first entry of the current file
		nextOffset int64
	)
	for i := range m.Entries {
		e := &m.Entries[i]
		at := func(format string, a ...any) error {
			return fmt.Errorf("entry %d (%q): %s", i, e.Name, fmt.Sprintf(format, a...))
		}
		if seen[e.Name] {
			return at("appears twice")
		}
		seen[e.Name] = true
		if err := jnf.ValidName(e.File); err != nil {
			return at("file: %v", err)
		}
		if e.Kind == jnf.KindFile {
			if prevLayer != -2 {
				return at("auxiliary file after record entries (files come first)")
			}
			if i > 0 && e.Name <= m.Entries[i-1].Name {
				return at("auxiliary files out of order (sorted by name)")
			}
			if !slices.Contains(hf.AuxFiles, e.Name) || e.File != e.Name {
				return at("not an auxiliary file Tarfa copies (file %q)", e.File)
			}
			if e.Layer != -1 || e.Expert != -1 || e.Offset != 0 || e.Length < 0 || e.DType != "" || e.Shape != nil || e.Parts != nil || e.Source != nil {
				return at("an auxiliary file entry has layer and expert -1, offset 0 and no tensor fields")
			}
			if _, err := e.Digests(); err != nil {
				return at("%v", err)
			}
			if e.Name == "config.json" {
				cfgSum = e.SHA256
			}
			continue
		}
		layer, ok := fileLayer(e.File)
		if !ok || layer != e.Layer {
			return at("file %q does not hold layer %d", e.File, e.Layer)
		}
		if layer >= m.Layers {
			return at("layer %d, but the model has %d layers", layer, m.Layers)
		}
		if err := e.Record.Validate(layer); err != nil {
			return at("%v", err)
		}
		if e.Kind == jnf.KindExpert && e.Name != hf.ExpertName(e.Layer, e.Expert) {
			return at("an expert record of layer %d expert %d is named %q", e.Layer, e.Expert, hf.ExpertName(e.Layer, e.Expert))
		}
		if e.File != prevFile {
			if layer <= prevLayer {
				return at("file %s after %s (files in order: global.jnf, layer-00000.jnf, …)", e.File, prevFile)
			}
			if fileStart >= 0 {
				if err := checkOrder(m.Entries[fileStart:i]); err != nil {
					return fmt.Errorf("%s: %w", prevFile, err)
				}
			}
			prevFile, prevLayer, fileStart = e.File, layer, i
			if layer < 0 {
				haveGlobal = true
			} else {
				held = append(held, layer)
			}
		} else if e.Offset != nextOffset {
			return at("offset %d, want %d (records are packed in table order on %d-byte boundaries)", e.Offset, nextOffset, jnf.Align)
		}
		nextOffset = jnf.AlignUp(e.Offset + e.Length)
		for _, s := range e.SourceRanges() {
			used[s.File] = true
		}
	}
	if fileStart >= 0 {
		if err := checkOrder(m.Entries[fileStart:]); err != nil {
			return fmt.Errorf("%s: %w", prevFile, err)
		}
	}
	if held == nil {
		held = []int{}
	}
	if !slices.Equal(held, m.LayersHeld) {
		return fmt.Errorf("layers_present %v, the entries hold layers %v", m.LayersHeld, held)
	}
	if complete := haveGlobal && len(held) == m.Layers; complete != m.Complete {
		return fmt.Errorf("complete = %t, the entries say %t (global.jnf present: %t, %d of %d layers)", m.Complete, complete, haveGlobal, len(held), m.Layers)
	}
	if cfgSum == "" {
		return fmt.Errorf("no config.json entry")
	}
	if m.ConfigSHA256 != cfgSum {
		return fmt.Errorf("config_sha256 %s, the config.json entry says %s", m.ConfigSHA256, cfgSum)
	}
	for i, s := range m.Sources {
		if err := jnf.ValidName(s.File); err != nil {
			return fmt.Errorf("sources[%d]: %v", i, err)
		}
		if i > 0 && s.File <= m.Sources[i-1].File {
			return fmt.Errorf("sources[%d]: %s out of order (sorted by file, each once)", i, s.File)
		}
		if _, err := jnf.ParseHex(jnf.SHA256, s.SHA256); err != nil || s.Size < 0 {
			return fmt.Errorf("sources[%d] %s: size %d, sha256 %q", i, s.File, s.Size, s.SHA256)
		}
		if !used[s.File] {
			return fmt.Errorf("sources list %s, from which no entry draws bytes", s.File)
		}
		delete(used, s.File)
	}
	for f := range used {
		return fmt.Errorf("entries draw bytes from %s, which sources do not list", f)
	}
	if !haveGlobal && (m.Layout != "" || len(m.Ignored) != 0) {
		return fmt.Errorf("layout and ignored come from global.jnf, which is not present")
	}
	return nil
}

// checkOrder enforces the canonical record order of one file: tensors by
// name, then experts by index.
func checkOrder(es []Entry) error {
	sawExpert, prevName, prevExpert := false, "", -1
	for i := range es {
		r := &es[i].Record
		switch r.Kind {
		case jnf.KindTensor:
			if sawExpert {
				return fmt.Errorf("tensor record %s after expert records (canonical order: tensors by name, then experts by index)", r.Name)
			}
			if r.Name <= prevName {
				return fmt.Errorf("tensor record %s out of order after %s (canonical order: tensors by name, then experts by index)", r.Name, prevName)
			}
			prevName = r.Name
		case jnf.KindExpert:
			sawExpert = true
			if r.Expert <= prevExpert {
				return fmt.Errorf("expert record %d out of order after %d (canonical order: tensors by name, then experts by index)", r.Expert, prevExpert)
			}
			prevExpert = r.Expert
		}
	}
	return nil
}

// auxLimit is the size cap for an auxiliary file.
func auxLimit(name string) int64 {
	if name == "config.json" {
		return jnf.MaxConfigSize
	}
	return jnf.MaxAuxFileSize
}

// Build derives the manifest of DIR from its JNF files' record tables and
// auxiliary files. It checks structure (every table valid, every table made
// from DIR's config.json, canonical record order, no JNF file that does not
// belong) but does not re-read record data; Check does that.
func Build(dir string) (*Manifest, error) {
	b, err := build(context.Background(), dir, nil)
	if err != nil {
		return nil, err
	}
	b.close()
	return b.manifest, nil
}

// built is a derived manifest with the open files whose tables it came
// from, and the open auxiliary files whose digests it holds.
type built struct {
	manifest *Manifest
	config   *hf.Config
	files    map[string]*jnf.File
	aux      map[string]*os.File
}

func (b *built) close() {
	for _, f := range b.files {
		f.Close()
	}
	for _, f := range b.aux {
		f.Close()
	}
}

// build derives the manifest of dir. cfgBytes are the bytes of config.json
// to derive it from (nil: read the file); the derived config.json entry
// hashes exactly these bytes.
func build(ctx context.Context, dir string, cfgBytes []byte) (_ *built, err error) {
	cfgPath := filepath.Join(dir, "config.json")
	if cfgBytes == nil {
		if cfgBytes, err = jnf.ReadModelFileLimit(cfgPath, jnf.MaxConfigSize, "config.json"); err != nil {
			return nil, fmt.Errorf("JNF directory %s: %w", dir, err)
		}
	}
	// A config.json Tarfa refuses is a directory that does not check (its
	// digest may match a manifest forged to fit it).
	cfg, err := hf.ParseConfig(cfgBytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", cfgPath, err, jnf.ErrVerification)
	}
	if cfg.Layers < 1 || cfg.Layers > MaxLayers {
		return nil, fmt.Errorf("%s: num_hidden_layers = %d, want 1 to %d: %w", cfgPath, cfg.Layers, MaxLayers, jnf.ErrVerification)
	}
	cfgSum := jnf.SHA256Bytes(cfgBytes).Hex()
	m := &Manifest{Format: ManifestFormat, Version: ManifestVersion, Arch: string(cfg.Arch), ModelType: cfg.ModelType,
		Layers: cfg.Layers, ConfigSHA256: cfgSum, LayersHeld: []int{}, Sources: []jnf.SourceFile{}}
	b := &built{manifest: m, config: cfg, files: map[string]*jnf.File{}, aux: map[string]*os.File{}}
	defer func() {
		if err != nil {
			b.close()
		}
	}()

	// Auxiliary files first, by name. Each stays open: what is hashed
	// here is what a reader of the directory reads later.
	for _, a := range hf.AuxFiles {
		var d jnf.Digests
		var n int64
		if a == "config.json" {
			d, n = jnf.SumBytes(cfgBytes), int64(len(cfgBytes))
		} else {
			var f *os.File
			if f, d, n, err = hashAux(filepath.Join(dir, a), auxLimit(a)); errors.Is(err, fs.ErrNotExist) {
				err = nil
				continue
			} else if err != nil {
				return nil, err
			}
			b.aux[a] = f
		}
		m.Entries = append(m.Entries, Entry{File: a, Record: jnf.Record{Kind: jnf.KindFile, Name: a, Layer: -1, Expert: -1,
			Length: n, SHA256: d.SHA256.Hex(), BLAKE3: d.BLAKE3.Hex()}})
	}
	sort.Slice(m.Entries, func(i, j int) bool { return m.Entries[i].Name < m.Entries[j].Name })

	names, err := jnfFiles(dir, cfg.Layers)
	if err != nil {
		return nil, err
	}
	sources := map[string]jnf.SourceFile{}
	haveGlobal := false
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		p := filepath.Join(dir, name)
		f, err := jnf.OpenFile(p)
		if err != nil {
			return nil, err
		}
		b.files[name] = f
		t := &f.Table
		if t.ConfigSHA256 != cfgSum {
			return nil, fmt.Errorf("%s was converted from a different config.json (config_sha256 %s, the directory's is %s): %w", p, t.ConfigSHA256, cfgSum, jnf.ErrVerification)
		}
		if err := checkTableOrder(t); err != nil {
			return nil, fmt.Errorf("%s: %w: %w", p, err, jnf.ErrVerification)
		}
		if t.Layer < 0 {
			haveGlobal = true
			m.Layout, m.Ignored = t.Layout, t.Ignored
		} else {
			m.LayersHeld = append(m.LayersHeld, t.Layer)
		}
		for _, s := range t.Sources {
			if prev, ok := sources[s.File]; ok && prev != s {
				return nil, fmt.Errorf("%s: source %s recorded as size %d sha256 %s, another file recorded size %d sha256 %s (converted from a different checkpoint?): %w", p, s.File, s.Size, s.SHA256, prev.Size, prev.SHA256, jnf.ErrVerification)
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
	return b, nil
}

// checkTableOrder is checkOrder for a record table.
func checkTableOrder(t *jnf.Table) error {
	es := make([]Entry, len(t.Records))
	for i := range t.Records {
		es[i].Record = t.Records[i]
		r := &t.Records[i]
		if r.Kind == jnf.KindExpert && r.Name != hf.ExpertName(r.Layer, r.Expert) {
			return fmt.Errorf("expert record named %q, want %q", r.Name, hf.ExpertName(r.Layer, r.Expert))
		}
	}
	return checkOrder(es)
}

// hashAux opens and hashes an auxiliary file, a regular file (not a link)
// of at most limit bytes, and returns it open.
func hashAux(path string, limit int64) (_ *os.File, _ jnf.Digests, _ int64, err error) {
	f, st, err := jnf.OpenModelFile(path)
	if err != nil {
		return nil, jnf.Digests{}, 0, err
	}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	if st.Size() > limit {
		return nil, jnf.Digests{}, 0, &jnf.LimitError{Path: path, Size: st.Size(), Max: limit, Which: filepath.Base(path)}
	}
	d, n, err := jnf.SumReader(io.NewSectionReader(f, 0, limit+1))
	if err != nil {
		return nil, jnf.Digests{}, 0, fmt.Errorf("%s: %w", path, err)
	}
	if n > limit {
		return nil, jnf.Digests{}, 0, &jnf.LimitError{Path: path, Size: n, Max: limit, Which: filepath.Base(path)}
	}
	return f, d, n, nil
}

// UnknownFileError names a *.jnf file in a model directory that does not
// belong there: a name outside the format, or a layer the model does not
// have. It matches jnf.ErrVerification: verify and run refuse it alike.
type UnknownFileError struct{ Dir, Name, Why string }

func (e *UnknownFileError) Error() string {
	return fmt.Sprintf("%s: %s: %s", e.Dir, e.Name, e.Why)
}
func (e *UnknownFileError) Is(target error) bool { return target == jnf.ErrVerification }

// jnfFiles lists the *.jnf files of dir in canonical order (global.jnf,
// then layers), refusing any whose name or layer does not belong to a model
// of the given number of layers.
func jnfFiles(dir string, layers int) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	type named struct {
		name  string
		layer int
	}
	var out []named
	for _, e := range ents {
		name := e.Name()
		if !strings.HasSuffix(name, ".jnf") || strings.HasPrefix(name, ".") {
			continue
		}
		l, ok := fileLayer(name)
		switch {
		case !ok:
			return nil, &UnknownFileError{Dir: dir, Name: name, Why: "not a JNF file name (global.jnf or layer-NNNNN.jnf)"}
		case l >= layers:
			return nil, &UnknownFileError{Dir: dir, Name: name, Why: fmt.Sprintf("layer %d, but config.json says the model has %d layers", l, layers)}
		}
		out = append(out, named{name, l})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].layer < out[j].layer })
	names := make([]string, len(out))
	for i, n := range out {
		names[i] = n.name
	}
	return names, nil
}

// Dir is an opened JNF directory whose stored manifest was checked against
// itself and re-derived from the files: the config.json bytes were compared
// with the manifest's digest before being parsed, and the record tables of
// Files are the very bytes the root was re-derived from. Close it.
type Dir struct {
	Path          string
	Manifest      *Manifest // the stored manifest; equal (same root) to the one derived from the files
	ManifestBytes []byte
	ConfigBytes   []byte
	Config        *hf.Config
	Files         map[string]*jnf.File // by file name; the tables the root was re-derived from
	// AuxFiles are the auxiliary files other than config.json, open: the
	// descriptors their digests were computed from. Read them, never their
	// paths: a file replaced since OpenDir is then never read.
	AuxFiles map[string]*os.File
}

// Close closes the files.
func (d *Dir) Close() error {
	for _, f := range d.Files {
		f.Close()
	}
	for _, f := range d.AuxFiles {
		f.Close()
	}
	return nil
}

// OpenDir opens a JNF directory for use: it loads the manifest
// (LoadManifest), reads config.json and compares its SHA-256 with the
// manifest before parsing it, re-derives the manifest from the files with
// those bytes and requires the same root. It does not re-read record data:
// the records are verified as they are read (package weights) or by Check.
// Every file of the directory is opened once, here (jnf.OpenModelFile:
// regular files only, a symbolic link is refused, not followed), and the
// Dir keeps the descriptors: readers read through them, never by path, so a
// file replaced after OpenDir is not read at all. Every mismatch matches
// jnf.ErrVerification; a directory that is no JNF directory gives a
// *NotJNFError.
func OpenDir(ctx context.Context, dir string) (*Dir, error) {
	m, raw, err := LoadManifest(dir)
	if err != nil {
		return nil, err
	}
	cfgBytes, err := readConfig(dir, m)
	if err != nil {
		return nil, err
	}
	b, err := build(ctx, dir, cfgBytes)
	if err != nil {
		return nil, err
	}
	if b.manifest.Root != m.Root {
		b.close()
		ps := compareManifests(m, b.manifest)
		return nil, fmt.Errorf("model %s: the files do not match the manifest (%d difference(s); run `tarfa verify %s`), first: %w", dir, len(ps), dir, ps[0])
	}
	return &Dir{Path: dir, Manifest: m, ManifestBytes: raw, ConfigBytes: cfgBytes, Config: b.config, Files: b.files, AuxFiles: b.aux}, nil
}

// ConfigChangedError says config.json does not hash to the manifest's
// digest for it. It matches jnf.ErrVerification.
type ConfigChangedError struct {
	Path      string
	Got, Want string // hex SHA-256
}

func (e *ConfigChangedError) Error() string {
	return fmt.Sprintf("%s changed: sha256 %s, the manifest records %s", e.Path, e.Got, e.Want)
}
func (e *ConfigChangedError) Is(target error) bool { return target == jnf.ErrVerification }

// readConfig reads config.json of dir (bounded) and returns its bytes only
// if they hash to the manifest's config_sha256: nothing is parsed first.
func readConfig(dir string, m *Manifest) ([]byte, error) {
	path := filepath.Join(dir, "config.json")
	b, err := jnf.ReadModelFileLimit(path, jnf.MaxConfigSize, "config.json")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w (the manifest lists it): %w", err, jnf.ErrVerification)
	}
	if err != nil {
		return nil, err
	}
	if got := jnf.SHA256Bytes(b).Hex(); got != m.ConfigSHA256 {
		return nil, &ConfigChangedError{Path: path, Got: got, Want: m.ConfigSHA256}
	}
	return b, nil
}
