package attest

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tarfa-ai/tarfa/jnf"
)

func testDigest(s string) jnf.Digest { return jnf.SHA256Bytes([]byte(s)) }

func testPredicate() ModelManifestPredicate {
	return ModelManifestPredicate{
		Root:           testDigest("root"),
		WeightsRoot:    testDigest("weights"),
		ManifestSHA256: testDigest("manifest"),
		Resources: []Resource{
			NewResource("manifest.json", testDigest("manifest")),
			NewResource("layer-000.jnf", testDigest("l0")),
			NewResource("tokenizer/tokenizer.json", testDigest("tok")),
			NewResource("tokenizer-extra.json", testDigest("tx")),
		},
	}
}

func testModelStatement(t testing.TB) Statement {
	t.Helper()
	s, err := NewModelManifestStatement("qwen3-moe-tiny", testPredicate())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestModelManifestStatementShape(t *testing.T) {
	s := testModelStatement(t)
	data, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var generic struct {
		Type          string `json:"_type"`
		PredicateType string `json:"predicateType"`
		Subject       []struct {
			Name   string            `json:"name"`
			Digest map[string]string `json:"digest"`
		} `json:"subject"`
		Predicate map[string]any `json:"predicate"`
	}
	if err := json.Unmarshal(data, &generic); err != nil {
		t.Fatal(err)
	}
	p := testPredicate()
	if generic.Type != "https://in-toto.io/Statement/v1" || generic.PredicateType != "https://tarfa.dev/attestation/model-manifest/v1" {
		t.Errorf("_type %q predicateType %q", generic.Type, generic.PredicateType)
	}
	if len(generic.Subject) != 1 || generic.Subject[0].Name != "qwen3-moe-tiny" ||
		len(generic.Subject[0].Digest) != 1 || generic.Subject[0].Digest["sha256"] != p.Root.Hex() {
		t.Errorf("subject %+v, want qwen3-moe-tiny with sha256 %s", generic.Subject, p.Root.Hex())
	}
	pred := generic.Predicate
	for k, want := range map[string]string{
		"root":            "sha256:" + p.Root.Hex(),
		"weights_root":    "sha256:" + p.WeightsRoot.Hex(),
		"manifest_sha256": "sha256:" + p.ManifestSHA256.Hex(),
		"format":          "jnf/v1",
	} {
		if pred[k] != want {
			t.Errorf("predicate.%s = %v, want %q", k, pred[k], want)
		}
	}
	ser, _ := pred["serialization"].(map[string]any)
	if ser["method"] != "tarfa-jnf-merkle" || ser["hash_type"] != "sha256" || len(ser) != 2 {
		t.Errorf("serialization %v", ser)
	}
	res, _ := pred["resources"].([]any)
	var names []string
	for _, r := range res {
		m := r.(map[string]any)
		if m["algorithm"] != "sha256" || len(m["digest"].(string)) != 64 {
			t.Errorf("resource %v", m)
		}
		names = append(names, m["name"].(string))
	}
	// Path-component order (OMS): "tokenizer/…" before "tokenizer-extra.json".
	want := []string{"layer-000.jnf", "manifest.json", "tokenizer/tokenizer.json", "tokenizer-extra.json"}
	if !slices.Equal(names, want) {
		t.Errorf("resource order %q, want %q", names, want)
	}

	got, err := s.ModelManifest()
	if err != nil {
		t.Fatal(err)
	}
	if !got.Root.Equal(p.Root) || got.Format != FormatJNFv1 || len(got.Resources) != 4 {
		t.Errorf("decoded predicate %+v", got)
	}
	// The caller's slice was not reordered.
	if p2 := testPredicate(); p2.Resources[0].Name != "manifest.json" {
		t.Error("input resources reordered")
	}
}

func TestModelManifestRejects(t *testing.T) {
	for name, mut := range map[string]func(p *ModelManifestPredicate){
		"blake3 root":         func(p *ModelManifestPredicate) { p.Root = jnf.Digest{Alg: jnf.BLAKE3} },
		"zero weights root":   func(p *ModelManifestPredicate) { p.WeightsRoot = jnf.Digest{} },
		"zero manifest":       func(p *ModelManifestPredicate) { p.ManifestSHA256 = jnf.Digest{} },
		"format":              func(p *ModelManifestPredicate) { p.Format = "jnf/v9" },
		"serialization":       func(p *ModelManifestPredicate) { p.Serialization = Serialization{"files", "sha256"} },
		"no resources":        func(p *ModelManifestPredicate) { p.Resources = nil },
		"duplicate resource":  func(p *ModelManifestPredicate) { p.Resources = append(p.Resources, p.Resources[0]) },
		"absolute name":       func(p *ModelManifestPredicate) { p.Resources[0].Name = "/etc/passwd" },
		"dot-dot name":        func(p *ModelManifestPredicate) { p.Resources[0].Name = "../x" },
		"unclean name":        func(p *ModelManifestPredicate) { p.Resources[0].Name = "a//b" },
		"backslash name":      func(p *ModelManifestPredicate) { p.Resources[0].Name = `a\b` },
		"md5 resource":        func(p *ModelManifestPredicate) { p.Resources[0].Algorithm = "md5" },
		"upper-case hex":      func(p *ModelManifestPredicate) { p.Resources[0].Digest = strings.ToUpper(p.Resources[0].Digest) },
		"short digest":        func(p *ModelManifestPredicate) { p.Resources[0].Digest = "abcd" },
		"empty resource name": func(p *ModelManifestPredicate) { p.Resources[0].Name = "" },
	} {
		p := testPredicate()
		mut(&p)
		_, err := NewModelManifestStatement("m", p)
		if !errors.Is(err, ErrPredicate) {
			t.Errorf("%s: got %v, want ErrPredicate", name, err)
		}
	}
	if _, err := NewModelManifestStatement("", testPredicate()); err == nil {
		t.Error("empty model name accepted")
	}

	// A statement whose subject disagrees with the predicate root.
	s := testModelStatement(t)
	s.Subject[0].Digest = NewDigestSet(testDigest("another model"))
	if _, err := s.ModelManifest(); !errors.Is(err, ErrPredicate) {
		t.Errorf("subject ≠ root: got %v, want ErrPredicate", err)
	}
	s = testModelStatement(t)
	s.Subject = append(s.Subject, s.Subject[0])
	if _, err := s.ModelManifest(); !errors.Is(err, ErrPredicate) {
		t.Errorf("two subjects: got %v, want ErrPredicate", err)
	}
	s = testModelStatement(t)
	s.Predicate = json.RawMessage(`{"root":"sha256:00","root":"x"}`)
	if _, err := s.ModelManifest(); !errors.Is(err, ErrPredicate) {
		t.Errorf("duplicate key in predicate: got %v, want ErrPredicate", err)
	}
	s = testModelStatement(t)
	s.PredicateType = PredicateOMSSignatureV1
	if _, err := s.ModelManifest(); !errors.Is(err, ErrPredicateType) {
		t.Errorf("OMS predicateType: got %v, want ErrPredicateType", err)
	}
}

func TestStatementValidate(t *testing.T) {
	good := testModelStatement(t)
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(s *Statement){
		"v0.1 type":          func(s *Statement) { s.Type = "https://in-toto.io/Statement/v0.1" },
		"no subject":         func(s *Statement) { s.Subject = nil },
		"subject no digest":  func(s *Statement) { s.Subject[0].Digest = nil },
		"empty digest value": func(s *Statement) { s.Subject[0].Digest = DigestSet{"sha256": ""} },
		"no predicateType":   func(s *Statement) { s.PredicateType = "" },
		"no predicate":       func(s *Statement) { s.Predicate = nil },
		"array predicate":    func(s *Statement) { s.Predicate = json.RawMessage(`[1]`) },
		"broken predicate":   func(s *Statement) { s.Predicate = json.RawMessage(`{"a":`) },
	} {
		s := testModelStatement(t)
		mut(&s)
		if err := s.Validate(); !errors.Is(err, ErrStatement) {
			t.Errorf("%s: got %v, want ErrStatement", name, err)
		}
	}
	for name, in := range map[string]string{
		"duplicate subject key": `{"_type":"https://in-toto.io/Statement/v1","subject":[],"subject":[{"name":"a","digest":{"sha256":"00"}}],"predicateType":"p","predicate":{}}`,
		"duplicate digest alg":  `{"_type":"https://in-toto.io/Statement/v1","subject":[{"name":"a","digest":{"sha256":"00","sha256":"11"}}],"predicateType":"p","predicate":{}}`,
		"not JSON":              `_type`,
	} {
		if _, err := ParseStatement([]byte(in)); !errors.Is(err, ErrEncoding) {
			t.Errorf("%s: got %v, want ErrEncoding", name, err)
		}
	}
	// Unknown fields are ignored, as in-toto requires.
	if _, err := ParseStatement([]byte(`{"_type":"https://in-toto.io/Statement/v1","subject":[{"name":"a","digest":{"sha256":"00"}}],"predicateType":"p","predicate":{},"extra":1}`)); err != nil {
		t.Errorf("unknown field: %v", err)
	}
}

func TestDigestSet(t *testing.T) {
	d := testDigest("x")
	s := NewDigestSet(d, jnf.Digest{Alg: jnf.BLAKE3, Sum: d.Sum})
	if got, err := s.Get(jnf.SHA256); err != nil || !got.Equal(d) {
		t.Errorf("Get sha256: %v %v", got, err)
	}
	if _, err := (DigestSet{"gitCommit": "abc"}).Get(jnf.SHA256); err == nil || !strings.Contains(err.Error(), "gitCommit") {
		t.Errorf("Get missing alg: %v, want an error naming the algorithms present", err)
	}
	if _, err := (DigestSet{"sha256": "zz"}).Get(jnf.SHA256); err == nil {
		t.Error("Get of non-hex: no error")
	}
}

// TestOMSReferencePayloads checks our OMS code against payloads made by the
// reference implementation (testdata/oms, see its README).
func TestOMSReferencePayloads(t *testing.T) {
	for _, f := range []string{"sample_model_folder.json", "deep_model_folder.json"} {
		data, err := os.ReadFile(filepath.Join("testdata", "oms", f))
		if err != nil {
			t.Fatal(err)
		}
		s, err := ParseStatement(data)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		p, err := s.OMSModel()
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		want, _ := s.Subject[0].Digest.Get(jnf.SHA256)
		got, err := OMSSubjectDigest(p.Resources)
		if err != nil || !got.Equal(want) {
			t.Fatalf("%s: OMSSubjectDigest %v (%v), want the reference %v", f, got, err, want)
		}
		// Rebuilding from shuffled resources gives the same subject and order.
		shuffled := slices.Clone(p.Resources)
		slices.Reverse(shuffled)
		ours, err := NewOMSStatement(s.Subject[0].Name, shuffled, nil)
		if err != nil {
			t.Fatal(err)
		}
		if ours.Subject[0].Digest["sha256"] != want.Hex() || ours.PredicateType != "https://model_signing/signature/v1.0" {
			t.Errorf("%s: rebuilt subject %v", f, ours.Subject)
		}
		op, err := ours.OMSModel()
		if err != nil || !slices.Equal(op.Resources, p.Resources) {
			t.Errorf("%s: rebuilt resources differ (%v)", f, err)
		}
		// Tampering with one resource digest breaks the subject binding.
		bad := s
		bad.Predicate = []byte(strings.Replace(string(s.Predicate), p.Resources[0].Digest, strings.Repeat("0", 64), 1))
		if _, err := bad.OMSModel(); !errors.Is(err, ErrPredicate) {
			t.Errorf("%s: tampered resource: got %v, want ErrPredicate", f, err)
		}
	}
}

func TestOMSRejects(t *testing.T) {
	rs := []Resource{NewResource("a", testDigest("a")), NewResource("b", testDigest("b"))}
	s, err := NewOMSStatement("m", rs, []string{".git"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(s.Predicate), `"ignore_paths":[".git"]`) || !strings.Contains(string(s.Predicate), `"allow_symlinks":false`) {
		t.Errorf("predicate %s", s.Predicate)
	}
	shard := s
	shard.Predicate = []byte(strings.Replace(string(s.Predicate), `"method":"files"`, `"method":"shards"`, 1))
	if _, err := shard.OMSModel(); !errors.Is(err, ErrPredicate) {
		t.Errorf("shards method: got %v, want ErrPredicate", err)
	}
	if _, err := NewOMSStatement("m", nil, nil); !errors.Is(err, ErrPredicate) {
		t.Errorf("no resources: got %v, want ErrPredicate", err)
	}
	if _, err := NewOMSStatement("", rs, nil); err == nil {
		t.Error("empty model name accepted")
	}
	if _, err := s.ModelManifest(); !errors.Is(err, ErrPredicateType) {
		t.Errorf("ModelManifest on OMS: got %v, want ErrPredicateType", err)
	}
}
