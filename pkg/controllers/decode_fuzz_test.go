package controllers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	apinetworking "istio.io/api/networking/v1"
	apisecurity "istio.io/api/security/v1beta1"
	k8snetworkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/validation"
)

// addConfigSeeds adds every YAML file of the repository's examples and
// golden inputs as a seed: real documents, which mutation then garbles.
func addConfigSeeds(f *testing.F) {
	var files []string
	for _, pattern := range []string{
		"../../examples/mesh/*.yaml",
		"../xds/envoygen/testdata/*/*.in.yaml",
		"../xds/grpcgen/testdata/*.in.yaml",
		"../xds/grpcgen/testdata/*/*.in.yaml",
	} {
		matches, err := filepath.Glob(pattern)
		if err != nil {
			f.Fatal(err)
		}
		files = append(files, matches...)
	}
	if len(files) < 10 {
		f.Fatalf("found %d seed files; the paths above are stale", len(files))
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
}

var lineRef = regexp.MustCompile(`\bline (\d+)\b`)

// FuzzDecodeFile feeds arbitrary files to the file source's decoder (the
// same decodeFile the directory source calls) and checks what it promises:
//   - it never panics, and it is deterministic;
//   - a file that does not parse gives one *ParseError whose line is a
//     line of the file, named in its message;
//   - an object it cannot use gives an *ObjectError at a line of the file,
//     and every field error in it has a line of the file too;
//   - an object it returns has a name that Kubernetes accepts, a namespace
//     unless its kind is cluster-scoped, and a revision;
//   - the ingester takes every decoded object: an Istio config is refused
//     exactly when its validator refuses it, and what is accepted lands in
//     the store; an Ingress always converts;
//   - a decoded object, written back as JSON, decodes to the same object.
func FuzzDecodeFile(f *testing.F) {
	addConfigSeeds(f)
	dec := newObjectDecoder()
	f.Fuzz(func(t *testing.T, data []byte) {
		lines := bytes.Count(data, []byte("\n")) + 1
		docs, err := dec.decodeFile(data)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) || pe != err {
				t.Fatalf("decodeFile error %T %v, want a *ParseError", err, err)
			}
			if pe.Line < 1 || pe.Line > lines {
				t.Fatalf("parse error at line %d of a %d-line file: %v", pe.Line, lines, err)
			}
			if !strings.HasPrefix(err.Error(), fmt.Sprintf("line %d: ", pe.Line)) {
				t.Fatalf("parse error %q does not lead with its line", err)
			}
			return
		}
		again, err := dec.decodeFile(data)
		if err != nil || len(again) != len(docs) {
			t.Fatalf("second decode differs: %d docs, %v (first: %d docs)", len(again), err, len(docs))
		}
		store := model.NewStore()
		ingester := NewIngester(IngesterOptions{Store: store})
		for i, d := range docs {
			if d.line < 1 || d.line > lines {
				t.Fatalf("document %d at line %d of a %d-line file", d.index, d.line, lines)
			}
			if again[i].key != d.key || again[i].hash != d.hash || (again[i].err == nil) != (d.err == nil) {
				t.Fatalf("second decode of document %d differs", d.index)
			}
			if d.err != nil {
				checkObjectError(t, d.err, lines)
				continue
			}
			checkDecodedObject(t, d)
			checkIngested(t, ingester, store, d.obj)
			checkRoundTrip(t, dec, d.obj)
		}
	})
}

func checkObjectError(t *testing.T, e *ObjectError, lines int) {
	t.Helper()
	if e.Line < 1 || e.Line > lines || e.Document < 0 || e.Reason == "" || e.Err == nil {
		t.Fatalf("object error %+v of a %d-line file", e, lines)
	}
	if !strings.Contains(e.Error(), fmt.Sprintf("line %d", e.Line)) {
		t.Fatalf("object error %q does not name its line", e)
	}
	for _, fe := range validation.FieldErrors(e.Err) {
		if fe.Line < 1 || fe.Line > lines || fe.Path == "" {
			t.Fatalf("field error %+v of a %d-line file", fe, lines)
		}
	}
	for _, m := range lineRef.FindAllStringSubmatch(e.Error(), -1) {
		var n int
		fmt.Sscan(m[1], &n)
		if n < 1 || n > lines {
			t.Fatalf("object error %q names line %d of a %d-line file", e, n, lines)
		}
	}
}

func checkDecodedObject(t *testing.T, d decodedDoc) {
	t.Helper()
	meta, err := objectMeta(d.obj)
	if err != nil {
		t.Fatal(err)
	}
	if meta.Name == "" || meta.Name != d.key.name || meta.Namespace != d.key.namespace {
		t.Fatalf("object %s/%s under key %+v", meta.Namespace, meta.Name, d.key)
	}
	if (meta.Namespace == "") != clusterScoped[d.key.groupKind] {
		t.Fatalf("%s %q has namespace %q", d.key.groupKind, meta.Name, meta.Namespace)
	}
	if meta.ResourceVersion == "" || d.hash == "" {
		t.Fatalf("%s %s/%s has no revision", d.key.groupKind, meta.Namespace, meta.Name)
	}
}

// checkIngested converts obj as the sources do and checks the verdict
// against the validators'.
func checkIngested(t *testing.T, in *Ingester, store model.Store, obj runtime.Object) {
	t.Helper()
	err := in.Upsert(obj)
	if kind, meta, spec, ok := istioConfigParts(obj); ok {
		// The kinds this target knows the validators of; others only need
		// to be stored exactly when accepted.
		var verdict error
		known := true
		switch s := spec.(type) {
		case *apinetworking.DestinationRule:
			verdict = validation.ValidateDestinationRule(meta.Name, meta.Namespace, s)
		case *apisecurity.PeerAuthentication:
			verdict = validation.ValidatePeerAuthentication(meta.Name, meta.Namespace, s)
		default:
			known = false
		}
		if known && (err == nil) != (verdict == nil) {
			t.Fatalf("ingester says %v, validator says %v", err, verdict)
		}
		if err != nil && len(validation.FieldErrors(errors.Unwrap(err))) == 0 {
			t.Fatalf("%s %s/%s refused without field errors: %v", kind, meta.Namespace, meta.Name, err)
		}
		var stored *model.Config
		for _, c := range store.Configs(kind) {
			if c.Namespace == meta.Namespace && c.Name == meta.Name {
				stored = c
			}
		}
		if (stored != nil) != (err == nil) {
			t.Fatalf("%s %s/%s: ingester error %v, stored %v", kind, meta.Namespace, meta.Name, err, stored != nil)
		}
		if stored != nil && !proto.Equal(stored.Spec, spec.(proto.Message)) {
			t.Fatalf("%s %s/%s stored with another spec", kind, meta.Namespace, meta.Name)
		}
		return
	}
	if err != nil {
		t.Fatalf("ingester refused a decoded %T: %v", obj, err)
	}
	if ing, ok := obj.(*k8snetworkingv1.Ingress); ok {
		got := store.Ingress(model.NamespacedName{Namespace: ing.Namespace, Name: ing.Name})
		if got == nil {
			t.Fatalf("Ingress %s/%s not stored", ing.Namespace, ing.Name)
		}
		if !sameIngress(got, ConvertIngress(ing)) {
			t.Fatalf("Ingress %s/%s: stored conversion differs from a fresh one", ing.Namespace, ing.Name)
		}
		paths := 0
		for _, r := range ing.Spec.Rules {
			if r.HTTP != nil {
				paths += len(r.HTTP.Paths)
			}
		}
		converted := 0
		for _, r := range got.Rules {
			converted += len(r.Paths)
		}
		if len(got.Rules) != len(ing.Spec.Rules) || converted != paths || len(got.TLS) != len(ing.Spec.TLS) {
			t.Fatalf("Ingress %s/%s: %d rules, %d paths, %d TLS converted from %d, %d, %d", ing.Namespace, ing.Name,
				len(got.Rules), converted, len(got.TLS), len(ing.Spec.Rules), paths, len(ing.Spec.TLS))
		}
	}
}

// checkRoundTrip writes obj back as JSON, as kubectl get -o json would,
// and decodes it again: the result must be the same object.
func checkRoundTrip(t *testing.T, dec *objectDecoder, obj runtime.Object) {
	t.Helper()
	js, err := json.Marshal(obj)
	if err != nil {
		t.Fatalf("%T does not marshal: %v", obj, err)
	}
	docs, err := dec.decodeFile(js)
	if err != nil {
		t.Fatalf("re-encoded %T does not parse: %v\n%s", obj, err, js)
	}
	if len(docs) != 1 || docs[0].err != nil {
		t.Fatalf("re-encoded %T decodes to %d objects, %v\n%s", obj, len(docs), docs[0].err, js)
	}
	got := docs[0].obj
	if _, meta, spec, ok := istioConfigParts(obj); ok {
		_, gotMeta, gotSpec, _ := istioConfigParts(got)
		if !equality.Semantic.DeepEqual(meta, gotMeta) || !proto.Equal(spec.(proto.Message), gotSpec.(proto.Message)) {
			t.Fatalf("%T changed in a JSON round trip:\n%s", obj, js)
		}
		return
	}
	if !equality.Semantic.DeepEqual(obj, got) {
		t.Fatalf("%T changed in a JSON round trip:\n%s", obj, js)
	}
}
