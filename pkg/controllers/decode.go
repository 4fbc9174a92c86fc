package controllers

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"

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
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
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
	securityv1.SchemeGroupVersion.WithKind("PeerAuthentication"):      true,
	securityv1beta1.SchemeGroupVersion.WithKind("PeerAuthentication"): true,
}

// clusterScoped kinds have no namespace, whatever a document says.
var clusterScoped = map[schema.GroupKind]bool{
	{Kind: "Namespace"}: true,
	{Group: k8snetworkingv1.GroupName, Kind: "IngressClass"}: true,
}

// decodedDoc is one document of a file: an object, or why there is none.
type decodedDoc struct {
	index int
	key   objectKey
	// hash identifies the document's content; equal hashes mean no change.
	hash string
	obj  runtime.Object
	err  *ObjectError
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
	// The universal deserializer is not strict: unknown fields are dropped.
	return &objectDecoder{codec: serializer.NewCodecFactory(scheme).UniversalDeserializer()}
}

// DecodeYAML decodes a multi-document YAML (or JSON) stream into the typed
// objects the sources understand, defaulting the namespace to "default".
// Each document that cannot be used yields an *ObjectError instead; the
// others are still returned.
func DecodeYAML(data []byte) ([]runtime.Object, []error) {
	var objs []runtime.Object
	var errs []error
	for _, d := range newObjectDecoder().decodeAll(data) {
		if d.err != nil {
			errs = append(errs, d.err)
			continue
		}
		objs = append(objs, d.obj)
	}
	return objs, errs
}

func (dec *objectDecoder) decodeAll(data []byte) []decodedDoc {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []decodedDoc
	for index := 0; ; index++ {
		raw, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			return append(out, decodedDoc{index: index, err: &ObjectError{Reason: ReasonDecode, Document: index, Err: err}})
		}
		if blankDocument(raw) {
			index-- // empty documents (a leading "---", comments) do not count
			continue
		}
		out = append(out, dec.decodeOne(index, raw))
	}
}

// blankDocument reports whether a document holds only comments and
// separators (the reader keeps a leading "---").
func blankDocument(doc []byte) bool {
	for line := range bytes.Lines(doc) {
		t := bytes.TrimSpace(line)
		if len(t) > 0 && t[0] != '#' && !bytes.Equal(t, []byte("---")) {
			return false
		}
	}
	return true
}

// docHeader is the part of a document that identifies it; it parses even
// when the rest of the document does not fit its type.
type docHeader struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Spec any `json:"spec"`
}

func (dec *objectDecoder) decodeOne(index int, raw []byte) decodedDoc {
	doc := decodedDoc{index: index}
	fail := func(h docHeader, reason string, err error) decodedDoc {
		doc.err = &ObjectError{Kind: h.Kind, Namespace: h.Metadata.Namespace, Name: h.Metadata.Name,
			Reason: reason, Document: index, Err: err}
		return doc
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return fail(docHeader{}, ReasonDecode, err)
	}
	var h docHeader
	if err := json.Unmarshal(js, &h); err != nil {
		return fail(docHeader{}, ReasonDecode, fmt.Errorf("not an object: %w", err))
	}
	if h.APIVersion == "" || h.Kind == "" {
		return fail(h, ReasonDecode, errors.New("apiVersion and kind are required"))
	}
	gv, err := schema.ParseGroupVersion(h.APIVersion)
	if err != nil {
		return fail(h, ReasonDecode, err)
	}
	gvk := gv.WithKind(h.Kind)
	if !acceptedKinds[gvk] {
		return fail(h, ReasonUnknownKind, fmt.Errorf("%s is not a kind meshpilot reads", gvk))
	}
	if h.Metadata.Name == "" {
		return fail(h, ReasonInvalid, errors.New("metadata.name is required"))
	}
	if md, ok := specDescriptors[gvk.GroupKind()]; ok {
		// The spec decoder lets a later oneof member silently replace an
		// earlier one; the API server's schema rejects such objects, so do
		// we.
		if err := checkOneofs(md, h.Spec, "spec"); err != nil {
			return fail(h, ReasonDecode, err)
		}
	}
	obj, _, err := dec.codec.Decode(js, nil, nil)
	if err != nil {
		return fail(h, ReasonDecode, err)
	}
	meta, err := objectMeta(obj)
	if err != nil {
		return fail(h, ReasonDecode, err)
	}
	sum := sha256.Sum256(js)
	doc.hash = hex.EncodeToString(sum[:8])
	if clusterScoped[gvk.GroupKind()] {
		meta.Namespace = ""
	} else if meta.Namespace == "" {
		meta.Namespace = defaultNamespace
	}
	// Files have no resourceVersion; the content hash serves as revision.
	if meta.ResourceVersion == "" {
		meta.ResourceVersion = doc.hash
	}
	doc.obj = obj
	doc.key = objectKey{groupKind: gvk.GroupKind(), namespace: meta.Namespace, name: meta.Name}
	return doc
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
