package controllers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// A restart lists every Service, EndpointSlice and Pod of the cluster, and
// the generated protobuf code decodes a list by appending each item to
// Items: a slice of 5,000 Services (about 1 KB each) is grown, copied and
// cleared a dozen times on its way to its size, and each discarded array
// is garbage for the collector to scan. That was a tenth of the CPU from
// exec to ready on 5,000 Services and 5,000 EndpointSlices. The informers
// of those kinds therefore list through listSized, which counts a
// protobuf list's items first and decodes each into a slice of the right
// size. Anything else (JSON, an error, a list it cannot read) goes
// through client-go's decoder, as the typed client's List would.

// protobufMagic prefixes every protobuf body of the API server: the
// runtime.Unknown envelope that follows names the kind and holds the
// object's bytes.
var protobufMagic = []byte("k8s\x00")

// Field numbers of runtime.Unknown, its TypeMeta, and every list kind.
const (
	unknownTypeMeta        = 1
	unknownRaw             = 2
	unknownContentEncoding = 3
	typeMetaKind           = 2
	listMeta               = 1
	listItems              = 2
)

// itemPointer is a pointer to a Kubernetes object that decodes itself, as
// every generated type does.
type itemPointer[T any] interface {
	*T
	runtime.Object
	Unmarshal([]byte) error
}

// errNotSizedList is why a body went to client-go's decoder instead.
var errNotSizedList = errors.New("not a protobuf list of the expected kind")

// decodeSizedList decodes body, a protobuf list of kind, into meta and
// items, sizing items once. It returns errNotSizedList, having written
// nothing, when body is not such a list.
func decodeSizedList[T any, P itemPointer[T]](body []byte, kind string, meta *metav1.ListMeta, items *[]T) error {
	raw, ok := listBody(body, kind)
	if !ok {
		return errNotSizedList
	}
	n := 0
	if !bytesFields(raw, func(num protowire.Number, _ []byte) bool {
		if num == listItems {
			n++
		}
		return true
	}) {
		return fmt.Errorf("decode %s: malformed protobuf", kind)
	}
	var out []T // nil for no items, as client-go decodes them
	if n > 0 {
		out = make([]T, n)
	}
	i := 0
	var err error
	bytesFields(raw, func(num protowire.Number, v []byte) bool {
		switch num {
		case listMeta:
			err = meta.Unmarshal(v)
		case listItems:
			err = P(&out[i]).Unmarshal(v)
			i++
		}
		return err == nil
	})
	if err != nil {
		return fmt.Errorf("decode %s: %w", kind, err)
	}
	*items = out
	return nil
}

// listBody returns the object bytes of a protobuf body if it holds an
// unencoded object of kind. The envelope is read in place: its fields are
// views of body.
func listBody(body []byte, kind string) ([]byte, bool) {
	env, ok := bytes.CutPrefix(body, protobufMagic)
	if !ok {
		return nil, false
	}
	var raw []byte
	var gotKind, encoding bool
	ok = bytesFields(env, func(num protowire.Number, v []byte) bool {
		switch num {
		case unknownTypeMeta:
			gotKind = typeMetaHasKind(v, kind)
		case unknownRaw:
			raw = v
		case unknownContentEncoding:
			encoding = len(v) > 0
		}
		return true
	})
	return raw, ok && gotKind && !encoding
}

// typeMetaHasKind reports whether a marshalled TypeMeta names kind.
func typeMetaHasKind(b []byte, kind string) bool {
	found := false
	ok := bytesFields(b, func(num protowire.Number, v []byte) bool {
		if num != typeMetaKind {
			return true
		}
		found = true
		return string(v) == kind
	})
	return ok && found
}

// bytesFields calls fn with each length-delimited field of the message b,
// in order, skipping the others. It returns false when b is malformed or
// fn returns false.
func bytesFields(b []byte, fn func(num protowire.Number, v []byte) bool) bool {
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return false
		}
		b = b[l:]
		if typ != protowire.BytesType {
			if l = protowire.ConsumeFieldValue(num, typ, b); l < 0 {
				return false
			}
			b = b[l:]
			continue
		}
		v, l := protowire.ConsumeBytes(b)
		if l < 0 {
			return false
		}
		b = b[l:]
		if !fn(num, v) {
			return false
		}
	}
	return true
}

// listSized lists resource, in every namespace, as the typed client's
// List does, and decodes a protobuf answer with decodeSizedList. sized
// says whether it did.
func listSized[T any, P itemPointer[T]](ctx context.Context, rc rest.Interface, resource string, opts metav1.ListOptions,
	list runtime.Object, kind string, meta *metav1.ListMeta, items *[]T) (sized bool, err error) {
	req := rc.Get().Resource(resource).VersionedParams(&opts, scheme.ParameterCodec)
	if opts.TimeoutSeconds != nil {
		req = req.Timeout(time.Duration(*opts.TimeoutSeconds) * time.Second)
	}
	var contentType string
	res := req.Do(ctx).ContentType(&contentType)
	if body, err := res.Raw(); err == nil && strings.HasPrefix(contentType, runtime.ContentTypeProtobuf) {
		if err := decodeSizedList[T, P](body, kind, meta, items); !errors.Is(err, errNotSizedList) {
			return true, err
		}
	}
	return false, res.Into(list)
}

// sizedListInformers makes factory list Services, EndpointSlices and Pods
// with listSized, and says whether it did: a clientset without a REST
// client (client-go's fake) keeps the factory's own informers.
func sizedListInformers(factory informers.SharedInformerFactory, client kubernetes.Interface) bool {
	core, ok := client.CoreV1().RESTClient().(*rest.RESTClient)
	if !ok || core == nil {
		return false
	}
	sizedInformer[corev1.Service](factory, client, core, "services", "ServiceList", newServiceList,
		client.CoreV1().Services(metav1.NamespaceAll).Watch)
	sizedInformer[discoveryv1.EndpointSlice](factory, client, client.DiscoveryV1().RESTClient(), "endpointslices", "EndpointSliceList",
		newEndpointSliceList, client.DiscoveryV1().EndpointSlices(metav1.NamespaceAll).Watch)
	sizedInformer[corev1.Pod](factory, client, core, "pods", "PodList", newPodList,
		client.CoreV1().Pods(metav1.NamespaceAll).Watch)
	return true
}

// newList makes an empty list of one kind, with what decodeSizedList fills.
type newList[T any] func() (list runtime.Object, meta *metav1.ListMeta, items *[]T)

func newServiceList() (runtime.Object, *metav1.ListMeta, *[]corev1.Service) {
	l := &corev1.ServiceList{}
	return l, &l.ListMeta, &l.Items
}

func newEndpointSliceList() (runtime.Object, *metav1.ListMeta, *[]discoveryv1.EndpointSlice) {
	l := &discoveryv1.EndpointSliceList{}
	return l, &l.ListMeta, &l.Items
}

func newPodList() (runtime.Object, *metav1.ListMeta, *[]corev1.Pod) {
	l := &corev1.PodList{}
	return l, &l.ListMeta, &l.Items
}

// sizedInformer gives factory the informer it would make for T (every
// namespace, indexed by namespace) but for its list function, listSized.
func sizedInformer[T any, P itemPointer[T]](factory informers.SharedInformerFactory, client kubernetes.Interface, rc rest.Interface,
	resource, kind string, empty newList[T], watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error)) {
	obj := P(new(T))
	factory.InformerFor(obj, func(_ kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		lw := &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
				list, meta, items := empty()
				_, err := listSized[T, P](ctx, rc, resource, opts, list, kind, meta, items)
				return list, err
			},
			WatchFuncWithContext: watchFn,
		}
		return cache.NewSharedIndexInformerWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, client), obj,
			cache.SharedIndexInformerOptions{ResyncPeriod: resync, Indexers: cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}})
	})
}
