package controllers

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"unicode"

	"google.golang.org/protobuf/reflect/protoreflect"

	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	networkingv1alpha3 "istio.io/client-go/pkg/apis/networking/v1alpha3"
	networkingv1beta1 "istio.io/client-go/pkg/apis/networking/v1beta1"
	securityv1 "istio.io/client-go/pkg/apis/security/v1"
	securityv1beta1 "istio.io/client-go/pkg/apis/security/v1beta1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	k8snetworkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	k8svalidation "k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/meshpilot/meshpilot/pkg/validation"
)

// defaultNamespace is where a namespaced object without one lands, as with
// kubectl apply.
const defaultNamespace = "default"

// acceptedKinds are the API types the file source reads, by group and
// version. The served versions of an Istio kind share one identity.
var acceptedKinds = map[schema.GroupVersionKind]bool{
	corev1.SchemeGroupVersion.WithKind("Service"):                     true,
	corev1.SchemeGroupVersion.WithKind("Pod"):                         true,
	corev1.SchemeGroupVersion.WithKind("Namespace"):                   true,
	corev1.SchemeGroupVersion.WithKind("Secret"):                      true,
	discoveryv1.SchemeGroupVersion.WithKind("EndpointSlice"):          true,
	k8snetworkingv1.SchemeGroupVersion.WithKind("Ingress"):            true,
	k8snetworkingv1.SchemeGroupVersion.WithKind("IngressClass"):       true,
	networkingv1.SchemeGroupVersion.WithKind("DestinationRule"):       true,
	networkingv1beta1.SchemeGroupVersion.WithKind("DestinationRule"):  true,
	networkingv1alpha3.SchemeGroupVersion.WithKind("DestinationRule"): true,
	networkingv1.SchemeGroupVersion.WithKind("VirtualService"):        true,
	networkingv1beta1.SchemeGroupVersion.WithKind("VirtualService"):   true,
	networkingv1alpha3.SchemeGroupVersion.WithKind("VirtualService"):  true,
	securityv1.SchemeGroupVersion.WithKind("PeerAuthentication"):      true,
	securityv1beta1.SchemeGroupVersion.WithKind("PeerAuthentication"): true,
}

// clusterScoped kinds have no namespace, whatever a document says.
var clusterScoped = map[schema.GroupKind]bool{
	{Kind: "Namespace"}: true,
	{Group: k8snetworkingv1.GroupName, Kind: "IngressClass"}: true,
}

// specTypes are the proto messages of the Istio specs, by group and kind.
// Their decoder drops what it does not know, so they are checked first.
var specTypes = map[schema.GroupKind]protoreflect.MessageDescriptor{
	{Group: "networking.istio.io", Kind: "DestinationRule"}:  validation.DestinationRuleSpec,
	{Group: "security.istio.io", Kind: "PeerAuthentication"}: validation.PeerAuthenticationSpec,
	{Group: "networking.istio.io", Kind: "VirtualService"}:   validation.VirtualServiceSpec,
}

// decodedDoc is one object of a file (one document, or one item of a
// List), or why it cannot be used.
type decodedDoc struct {
	index int
	// line is where the object starts in its file.
	line int
	key  objectKey
	// hash identifies the document's content; equal hashes mean no change.
	hash string
	obj  runtime.Object
	err  *ObjectError

	// text and under locate the fields of errors found later, when the
	// object is applied.
	text  *docText
	under string
}

// objectKey identifies an object across versions of its API.
type objectKey struct {
	groupKind schema.GroupKind
	namespace string
	name      string
}

// objectDecoder turns YAML documents into typed objects.
type objectDecoder struct {
	codec runtime.Decoder
}

func newObjectDecoder() *objectDecoder {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, discoveryv1.AddToScheme, k8snetworkingv1.AddToScheme,
		networkingv1.AddToScheme, networkingv1beta1.AddToScheme, networkingv1alpha3.AddToScheme,
		securityv1.AddToScheme, securityv1beta1.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			panic(fmt.Sprintf("building the decoding scheme: %v", err)) // a programming error
		}
	}
	// Strict, as `kubectl --validate=strict`: unknown and duplicate fields
	// are reported (the object still decodes, so the report can name it).
	return &objectDecoder{codec: serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()}
}

// DecodeYAML decodes a multi-document YAML (or JSON) stream into the typed
// objects the sources understand, defaulting the namespace to "default".
// Each object that cannot be used yields an *ObjectError instead, and the
// others are still returned; a stream that does not parse yields only its
// *ParseError.
func DecodeYAML(data []byte) ([]runtime.Object, []error) {
	docs, err := newObjectDecoder().decodeFile(data)
	if err != nil {
		return nil, []error{err}
	}
	var objs []runtime.Object
	var errs []error
	for _, d := range docs {
		if d.err != nil {
			errs = append(errs, d.err)
			continue
		}
		objs = append(objs, d.obj)
	}
	return objs, errs
}

// decodeFile decodes every object of a file. It fails with a *ParseError
// when the file does not parse: a document is not YAML (or JSON), or
// cannot be told apart from others (it is not an object, or its
// apiVersion, kind or name is missing or garbled). An object that is identified but unusable (a
// kind meshpilot does not read, a field that does not exist or holds the
// wrong type) is a decodedDoc with err set.
func (dec *objectDecoder) decodeFile(data []byte) ([]decodedDoc, error) {
	texts, err := splitDocuments(data)
	if err != nil {
		return nil, err
	}
	var out []decodedDoc
	for index, text := range texts {
		docs, err := dec.decodeDocument(index, text)
		if err != nil {
			return nil, err
		}
		out = append(out, docs...)
	}
	return out, nil
}

// decodeDocument decodes one document: one object, or the items of a List.
func (dec *objectDecoder) decodeDocument(index int, text *docText) ([]decodedDoc, error) {
	js := text.data
	if !text.isJSON {
		var err error
		if js, err = yaml.YAMLToJSONStrict(text.data); err != nil {
			return nil, text.yamlError(err)
		}
	}
	var v any
	d := json.NewDecoder(bytes.NewReader(js))
	d.UseNumber() // so integers are checked as written
	if err := d.Decode(&v); err != nil {
		return nil, &ParseError{Line: text.line, Err: fmt.Errorf("document %d: %w", index, err)}
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, &ParseError{Line: text.line, Err: fmt.Errorf("document %d is not an object", index)}
	}
	items, isList := obj["items"].([]any)
	if kind, _ := obj["kind"].(string); !isList || !strings.HasSuffix(kind, "List") {
		doc, err := dec.decodeObject(index, text, "", obj, js)
		return []decodedDoc{doc}, err
	}
	// A List (as `kubectl get -o yaml` writes) stands for its items.
	out := make([]decodedDoc, 0, len(items))
	for i, item := range items {
		under := fmt.Sprintf("items[%d]", i)
		fields, ok := item.(map[string]any)
		if !ok {
			return nil, &ParseError{Line: text.lineOf(under), Err: fmt.Errorf("document %d: %s is not an object", index, under)}
		}
		itemJS, err := json.Marshal(fields)
		if err != nil {
			return nil, &ParseError{Line: text.lineOf(under), Err: err}
		}
		doc, err := dec.decodeObject(index, text, under, fields, itemJS)
		if err != nil {
			return nil, err
		}
		out = append(out, doc)
	}
	return out, nil
}

// decodeObject decodes one object of a document, whose fields are fields
// and JSON js; under is its path in the document ("" or "items[i]").
func (dec *objectDecoder) decodeObject(index int, text *docText, under string, fields map[string]any, js []byte) (decodedDoc, error) {
	doc := decodedDoc{index: index, line: text.line, text: text, under: under}
	if under != "" {
		doc.line = text.lineOf(under)
	}
	apiVersion, _ := fields["apiVersion"].(string)
	kind, _ := fields["kind"].(string)
	meta, _ := fields["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	namespace, _ := meta["namespace"].(string)
	what := fmt.Sprintf("document %d", index)
	if under != "" {
		what += " " + under
	}
	unknown := func(format string, args ...any) error {
		return &ParseError{Line: doc.line, Err: fmt.Errorf(what+": "+format, args...)}
	}
	// An identity that is missing or garbled ("kind: Service - [x", where
	// an edit ran two lines together) cannot say which object this was.
	if apiVersion == "" || kind == "" {
		return doc, unknown("apiVersion and kind are required")
	}
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil || !kindName.MatchString(kind) || len(k8svalidation.IsDNS1123Label(gv.Version)) > 0 ||
		(gv.Group != "" && len(k8svalidation.IsDNS1123Subdomain(gv.Group)) > 0) {
		return doc, unknown("%q of %q is not a kind of an API version", kind, apiVersion)
	}
	if name == "" {
		return doc, unknown("metadata.name is required")
	}
	gvk := gv.WithKind(kind)
	// Names are checked only for the kinds read; others have rules of
	// their own ("system:" names), but never blanks.
	if strings.ContainsFunc(name+namespace, unicode.IsSpace) || (acceptedKinds[gvk] &&
		(len(k8svalidation.IsDNS1123Subdomain(name)) > 0 || (namespace != "" && len(k8svalidation.IsDNS1123Label(namespace)) > 0))) {
		return doc, unknown("%q is not a name of a %s", strings.TrimPrefix(namespace+"/"+name, "/"), kind)
	}
	if namespace == "" && acceptedKinds[gvk] && !clusterScoped[gvk.GroupKind()] {
		namespace = defaultNamespace
	}
	fail := func(reason string, err error) (decodedDoc, error) {
		doc.err = &ObjectError{Kind: kind, Namespace: namespace, Name: name, Reason: reason,
			Document: index, Line: doc.line, Err: text.locate(err, under)}
		return doc, nil
	}
	if !acceptedKinds[gvk] {
		return fail(ReasonUnknownKind, fmt.Errorf("%s is not a kind meshpilot reads", gvk))
	}
	if md, ok := specTypes[gvk.GroupKind()]; ok {
		if err := validation.CheckFields(md, fields["spec"], "spec"); err != nil {
			return fail(ReasonDecode, err)
		}
	}
	obj, _, err := dec.codec.Decode(js, nil, nil)
	if err != nil {
		return fail(ReasonDecode, decodeFieldErrors(err))
	}
	objMeta, err := objectMeta(obj)
	if err != nil {
		return fail(ReasonDecode, err)
	}
	sum := sha256.Sum256(js)
	doc.hash = hex.EncodeToString(sum[:8])
	if clusterScoped[gvk.GroupKind()] {
		objMeta.Namespace = ""
	} else if objMeta.Namespace == "" {
		objMeta.Namespace = defaultNamespace
	}
	// Files have no resourceVersion; the content hash serves as revision.
	if objMeta.ResourceVersion == "" {
		objMeta.ResourceVersion = doc.hash
	}
	doc.obj = obj
	doc.key = objectKey{groupKind: gvk.GroupKind(), namespace: objMeta.Namespace, name: objMeta.Name}
	return doc, nil
}

var (
	// kindName is what a kind looks like: "EndpointSlice".
	kindName         = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]*$`)
	strictFieldError = regexp.MustCompile(`^(unknown|duplicate) field "(.*)"$`)
	// jsonTypeError is how the Kubernetes JSON decoder names a value of the
	// wrong type: "json: cannot unmarshal string into Go struct field
	// ServicePort.spec.ports.port of type int32".
	jsonTypeError = regexp.MustCompile(`cannot unmarshal (\w+) into Go struct field [^.\s]+\.(\S+) of type (\S+)`)
)

// decodeFieldErrors rewrites the Kubernetes decoder's errors about fields
// as field errors, so that they read as the others and get their lines.
func decodeFieldErrors(err error) error {
	if strict, ok := runtime.AsStrictDecodingError(err); ok {
		var out fieldErrors
		for _, e := range strict.Errors() {
			m := strictFieldError.FindStringSubmatch(e.Error())
			if m == nil {
				return err
			}
			out = append(out, &validation.FieldError{Path: m[2], Message: m[1] + " field"})
		}
		return out
	}
	if m := jsonTypeError.FindStringSubmatch(err.Error()); m != nil {
		return &validation.FieldError{Path: m[2], Message: fmt.Sprintf("want %s, got %s", m[3], m[1])}
	}
	return err
}

func objectMeta(obj runtime.Object) (*metav1.ObjectMeta, error) {
	accessor, ok := obj.(interface{ GetObjectMeta() metav1.Object })
	if !ok {
		return nil, fmt.Errorf("%T has no metadata", obj)
	}
	meta, ok := accessor.GetObjectMeta().(*metav1.ObjectMeta)
	if !ok {
		return nil, fmt.Errorf("%T has unexpected metadata", obj)
	}
	return meta, nil
}
