package controllers

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

func encodeProtobuf(t testing.TB, obj runtime.Object) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(obj, &b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// clientGoDecode is what the typed client's List does with a body.
func clientGoDecode(t testing.TB, body []byte, into runtime.Object) {
	t.Helper()
	if _, _, err := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Decode(body, nil, into); err != nil {
		t.Fatal(err)
	}
}

func testServiceList(n int) *corev1.ServiceList {
	l := &corev1.ServiceList{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceList"},
		ListMeta: metav1.ListMeta{ResourceVersion: "4711", Continue: "next"},
	}
	for i := range n {
		l.Items = append(l.Items, corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("svc-%d", i), Namespace: fmt.Sprintf("scale-%d", i%50),
				UID: "8f3c", ResourceVersion: fmt.Sprint(100 + i), Labels: map[string]string{"app": "web"}},
			Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.1", ClusterIPs: []string{"10.96.0.1"}, Type: corev1.ServiceTypeClusterIP,
				Selector: map[string]string{"app": fmt.Sprintf("svc-%d", i)},
				Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}}},
		})
	}
	return l
}

// TestDecodeSizedListMatchesClientGo decodes protobuf lists of each kind
// the sized informers list, and expects what client-go's decoder makes of
// the same bytes, with Items allocated once at their length.
func TestDecodeSizedListMatchesClientGo(t *testing.T) {
	slices := &discoveryv1.EndpointSliceList{TypeMeta: metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSliceList"}}
	for i := range 3 {
		slices.Items = append(slices.Items, discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: fmt.Sprintf("web-%d", i), Namespace: "default", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{fmt.Sprintf("10.0.0.%d", i+1)},
				Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)}, NodeName: ptr("node-1")}},
			Ports: []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr[int32](8080)}},
		})
	}
	pods := &corev1.PodList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PodList"},
		Items: []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "default"},
			Spec:   corev1.PodSpec{ServiceAccountName: "web", Containers: []corev1.Container{{Name: "app", Image: "web:1"}}},
			Status: corev1.PodStatus{PodIP: "10.0.0.1", PodIPs: []corev1.PodIP{{IP: "10.0.0.1"}}}}}}

	cases := []struct {
		name  string
		list  runtime.Object
		check func(t *testing.T, body []byte)
	}{
		{"services", testServiceList(40), matchesClientGo("ServiceList", newServiceList)},
		{"no services", testServiceList(0), matchesClientGo("ServiceList", newServiceList)},
		{"endpoint slices", slices, matchesClientGo("EndpointSliceList", newEndpointSliceList)},
		{"pods", pods, matchesClientGo("PodList", newPodList)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { tc.check(t, encodeProtobuf(t, tc.list)) })
	}
}

// matchesClientGo checks that decodeSizedList makes of a body of kind what
// client-go's decoder makes of it.
func matchesClientGo[T any, P itemPointer[T]](kind string, empty newList[T]) func(*testing.T, []byte) {
	return func(t *testing.T, body []byte) {
		_, meta, items := empty()
		if err := decodeSizedList[T, P](body, kind, meta, items); err != nil {
			t.Fatal(err)
		}
		want, wantMeta, wantItems := empty()
		clientGoDecode(t, body, want)
		if !apiequality.Semantic.DeepEqual(*meta, *wantMeta) || !apiequality.Semantic.DeepEqual(*items, *wantItems) {
			t.Errorf("decoded\n%+v\n%+v\nclient-go decodes\n%+v\n%+v", *meta, *items, *wantMeta, *wantItems)
		}
	}
}

// TestDecodeSizedListLeavesOthersToClientGo: what is not a protobuf list
// of the kind asked for is left alone, for client-go's decoder; a list
// that is one but broken is an error.
func TestDecodeSizedListLeavesOthersToClientGo(t *testing.T) {
	services := encodeProtobuf(t, testServiceList(3))
	var asJSON bytes.Buffer
	if err := json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme.Scheme, scheme.Scheme, json.SerializerOptions{}).
		Encode(testServiceList(3), &asJSON); err != nil {
		t.Fatal(err)
	}
	status := encodeProtobuf(t, &metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
		Status: metav1.StatusFailure, Reason: metav1.StatusReasonExpired, Code: 410})
	// The same list, marked as encoded (gzip, say) inside the envelope.
	encoded := protowire.AppendTag(bytes.Clone(services), unknownContentEncoding, protowire.BytesType)
	encoded = protowire.AppendString(encoded, "gzip")
	// The list's items cut short: the envelope reads, the list does not.
	truncated := truncateRaw(t, services)

	cases := []struct {
		name    string
		body    []byte
		kind    string
		wantErr error // nil: decoded; errNotSizedList: left alone; other: any other error
	}{
		{"services", services, "ServiceList", nil},
		{"another kind asked for", services, "PodList", errNotSizedList},
		{"json", asJSON.Bytes(), "ServiceList", errNotSizedList},
		{"status", status, "ServiceList", errNotSizedList},
		{"encoded", encoded, "ServiceList", errNotSizedList},
		{"empty", nil, "ServiceList", errNotSizedList},
		{"broken envelope", append(bytes.Clone(protobufMagic), 0x0a, 0xff), "ServiceList", errNotSizedList},
		{"broken list", truncated, "ServiceList", errors.New("any")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var l corev1.ServiceList
			err := decodeSizedList[corev1.Service](tc.body, tc.kind, &l.ListMeta, &l.Items)
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("error %v, want the list decoded", err)
			case tc.wantErr == nil && len(l.Items) != 3:
				t.Fatalf("%d items, want 3", len(l.Items))
			case errors.Is(tc.wantErr, errNotSizedList) && (!errors.Is(err, errNotSizedList) || l.Items != nil || l.ResourceVersion != ""):
				t.Fatalf("error %v, items %d: want it left for client-go, nothing written", err, len(l.Items))
			case tc.wantErr != nil && !errors.Is(tc.wantErr, errNotSizedList) && (err == nil || errors.Is(err, errNotSizedList)):
				t.Fatalf("error %v, want a decoding error", err)
			}
		})
	}
}

// truncateRaw shortens the list inside a protobuf body by one byte,
// keeping the envelope well formed.
func truncateRaw(t *testing.T, body []byte) []byte {
	t.Helper()
	env := body[len(protobufMagic):]
	out := bytes.Clone(protobufMagic)
	for len(env) > 0 {
		num, typ, l := protowire.ConsumeTag(env)
		env = env[l:]
		v, l := protowire.ConsumeBytes(env)
		if typ != protowire.BytesType || l < 0 {
			t.Fatal("unexpected envelope")
		}
		env = env[l:]
		if num == unknownRaw {
			v = v[:len(v)-1]
		}
		out = protowire.AppendTag(out, num, typ)
		out = protowire.AppendBytes(out, v)
	}
	return out
}

// BenchmarkDecodeServiceList decodes the list a restart reads at 5,000
// Services, as client-go's decoder does and with Items sized first.
func BenchmarkDecodeServiceList(b *testing.B) {
	body := encodeProtobuf(b, testServiceList(5000))
	b.Run("client-go", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var l corev1.ServiceList
			clientGoDecode(b, body, &l)
		}
	})
	b.Run("sized", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var l corev1.ServiceList
			if err := decodeSizedList[corev1.Service](body, "ServiceList", &l.ListMeta, &l.Items); err != nil || len(l.Items) != 5000 {
				b.Fatal(err)
			}
		}
	})
}

// TestSizedListInformersNeedARESTClient: a real clientset gets the sized
// informers, client-go's fake (no REST client to list with) keeps the
// factory's.
func TestSizedListInformersNeedARESTClient(t *testing.T) {
	clientset, err := kubernetes.NewForConfig(&rest.Config{Host: "https://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		client kubernetes.Interface
		want   bool
	}{
		{"clientset", clientset, true},
		{"fake", fake.NewClientset(), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			factory := informers.NewSharedInformerFactory(tc.client, 0)
			if got := sizedListInformers(factory, tc.client); got != tc.want {
				t.Errorf("sized informers installed: %v, want %v", got, tc.want)
			}
		})
	}
}
