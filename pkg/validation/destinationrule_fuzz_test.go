package validation_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/meshpilot/meshpilot/pkg/controllers"
	"github.com/meshpilot/meshpilot/pkg/validation"
)

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// FuzzValidateDestinationRule runs a DestinationRule spec, as JSON, through
// the steps a source takes: the strict field check, the typed decoder, the
// validator and the conversion. Each step may refuse, but never panics,
// and:
//   - every problem is a field error whose path starts at the object's
//     root (spec or metadata), so that it can be located in a file;
//   - a spec the field check accepts, the typed decoder reads;
//   - the validator's verdict does not depend on when it is asked;
//   - a rule the validator accepts converts without error, carrying the
//     spec and the object's name.
func FuzzValidateDestinationRule(f *testing.F) {
	seeds := addSpecSeeds(f, "DestinationRule", "../xds/envoygen/testdata/*/*.in.yaml", "../../examples/mesh/*.yaml")
	if seeds < 10 {
		f.Fatalf("%d seed rules; the golden inputs moved", seeds)
	}
	f.Fuzz(func(t *testing.T, name, namespace string, spec []byte) {
		if !json.Valid(spec) {
			return // not one JSON value: the file decoder's concern (FuzzDecodeFile)
		}
		var fields any
		d := json.NewDecoder(bytes.NewReader(spec))
		d.UseNumber()
		if err := d.Decode(&fields); err != nil {
			t.Fatal(err)
		}
		if err := validation.CheckFields(validation.DestinationRuleSpec, fields, "spec"); err != nil {
			checkFieldErrors(t, err, "spec")
			return
		}
		var dr networking.DestinationRule
		if err := json.Unmarshal(spec, &dr); err != nil {
			t.Fatalf("the field check accepted a spec the typed decoder refuses: %v\n%s", err, spec)
		}
		verdict := validation.ValidateDestinationRule(name, namespace, &dr)
		again := validation.ValidateDestinationRule(name, namespace, proto.Clone(&dr).(*networking.DestinationRule))
		if errText(verdict) != errText(again) {
			t.Fatalf("two validations of one rule disagree:\n%v\n%v", verdict, again)
		}
		if verdict != nil {
			checkFieldErrors(t, verdict, "spec", "metadata")
			return
		}
		meta := &metav1.ObjectMeta{Name: name, Namespace: namespace, ResourceVersion: "1"}
		cfg, err := controllers.ConvertDestinationRule(meta, &dr)
		if err != nil {
			t.Fatalf("validated rule does not convert: %v", err)
		}
		if cfg.Name != name || cfg.Namespace != namespace || cfg.Spec != proto.Message(&dr) {
			t.Fatalf("converted rule %s/%s does not carry the object", cfg.Namespace, cfg.Name)
		}
	})
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// checkFieldErrors asserts that err is made of field errors only, each
// with a path under one of roots.
func checkFieldErrors(t *testing.T, err error, roots ...string) {
	t.Helper()
	fes := validation.FieldErrors(err)
	if len(fes) == 0 {
		t.Fatalf("error %v is not made of field errors", err)
	}
	for _, fe := range fes {
		ok := false
		for _, root := range roots {
			ok = ok || fe.Path == root || strings.HasPrefix(fe.Path, root+".") || strings.HasPrefix(fe.Path, root+"[")
		}
		if !ok || fe.Message == "" {
			t.Fatalf("field error %q: path not under %v", fe, roots)
		}
	}
}

// addSpecSeeds adds to f the name, namespace and spec of every object of
// kind in the YAML files the patterns match, and returns how many.
func addSpecSeeds(f *testing.F, kind string, patterns ...string) int {
	f.Helper()
	seeds := 0
	for _, pattern := range patterns {
		files, err := filepath.Glob(pattern)
		if err != nil {
			f.Fatal(err)
		}
		for _, file := range files {
			raw, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			for _, doc := range docSeparator.Split(string(raw), -1) {
				var obj struct {
					Kind     string            `json:"kind"`
					Metadata metav1.ObjectMeta `json:"metadata"`
					Spec     json.RawMessage   `json:"spec"`
				}
				if yaml.Unmarshal([]byte(doc), &obj) != nil || obj.Kind != kind {
					continue
				}
				f.Add(obj.Metadata.Name, obj.Metadata.Namespace, []byte(obj.Spec))
				seeds++
			}
		}
	}
	return seeds
}
