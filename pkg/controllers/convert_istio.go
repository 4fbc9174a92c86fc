package controllers

import (
	"errors"

	"google.golang.org/protobuf/proto"
	apinetworking "istio.io/api/networking/v1"
	apisecurity "istio.io/api/security/v1beta1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	networkingv1alpha3 "istio.io/client-go/pkg/apis/networking/v1alpha3"
	networkingv1beta1 "istio.io/client-go/pkg/apis/networking/v1beta1"
	securityv1 "istio.io/client-go/pkg/apis/security/v1"
	securityv1beta1 "istio.io/client-go/pkg/apis/security/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/validation"
)

// istioConfigParts unpacks any served version of an Istio config kind that
// meshpilot reads. The versions of one kind carry the same proto spec type,
// so the store holds one type per kind whatever version was read.
func istioConfigParts(obj any) (model.Kind, *metav1.ObjectMeta, any, bool) {
	switch o := obj.(type) {
	case *networkingv1.DestinationRule:
		return model.KindDestinationRule, &o.ObjectMeta, &o.Spec, true
	case *networkingv1beta1.DestinationRule:
		return model.KindDestinationRule, &o.ObjectMeta, &o.Spec, true
	case *networkingv1alpha3.DestinationRule:
		return model.KindDestinationRule, &o.ObjectMeta, &o.Spec, true
	case *networkingv1.VirtualService:
		return model.KindVirtualService, &o.ObjectMeta, &o.Spec, true
	case *networkingv1beta1.VirtualService:
		return model.KindVirtualService, &o.ObjectMeta, &o.Spec, true
	case *networkingv1alpha3.VirtualService:
		return model.KindVirtualService, &o.ObjectMeta, &o.Spec, true
	case *securityv1.PeerAuthentication:
		return model.KindPeerAuthentication, &o.ObjectMeta, &o.Spec, true
	case *securityv1beta1.PeerAuthentication:
		return model.KindPeerAuthentication, &o.ObjectMeta, &o.Spec, true
	}
	return 0, nil, nil, false
}

// convertIstioConfig validates an Istio config's spec with its kind's
// validator and wraps it as a model.Config.
func convertIstioConfig(meta *metav1.ObjectMeta, spec any) (*model.Config, error) {
	switch s := spec.(type) {
	case *apinetworking.DestinationRule:
		return ConvertDestinationRule(meta, s)
	case *apisecurity.PeerAuthentication:
		return ConvertPeerAuthentication(meta, s)
	case *apinetworking.VirtualService:
		return ConvertVirtualService(meta, s)
	}
	return nil, errors.New("unsupported Istio config spec")
}

// ConvertDestinationRule validates a DestinationRule and wraps it as a
// model.Config. The spec is shared with the object, not copied.
func ConvertDestinationRule(meta *metav1.ObjectMeta, spec *apinetworking.DestinationRule) (*model.Config, error) {
	if err := validation.ValidateDestinationRule(meta.Name, meta.Namespace, spec); err != nil {
		return nil, err
	}
	return newConfig(model.KindDestinationRule, meta, spec), nil
}

// ConvertPeerAuthentication validates a PeerAuthentication and wraps it as
// a model.Config whose Spec is the *PeerAuthentication of
// istio.io/api/security/v1beta1 (v1 aliases it). The spec is shared with
// the object, not copied.
func ConvertPeerAuthentication(meta *metav1.ObjectMeta, spec *apisecurity.PeerAuthentication) (*model.Config, error) {
	if err := validation.ValidatePeerAuthentication(meta.Name, meta.Namespace, spec); err != nil {
		return nil, err
	}
	return newConfig(model.KindPeerAuthentication, meta, spec), nil
}

// ConvertVirtualService validates a VirtualService and wraps it as a
// model.Config whose Spec is the *VirtualService of istio.io/api/networking/v1
// (which aliases v1alpha3's, as v1beta1's does). The spec is shared with the
// object, not copied.
func ConvertVirtualService(meta *metav1.ObjectMeta, spec *apinetworking.VirtualService) (*model.Config, error) {
	if err := validation.ValidateVirtualService(meta.Name, meta.Namespace, spec); err != nil {
		return nil, err
	}
	return newConfig(model.KindVirtualService, meta, spec), nil
}

// newConfig wraps a validated, non-nil spec (validators refuse nil).
func newConfig(kind model.Kind, meta *metav1.ObjectMeta, spec proto.Message) *model.Config {
	return &model.Config{
		Kind:         kind,
		Name:         meta.Name,
		Namespace:    meta.Namespace,
		Labels:       meta.Labels,
		Annotations:  meta.Annotations,
		Revision:     meta.ResourceVersion,
		Generation:   meta.Generation,
		CreationTime: meta.CreationTimestamp.Time,
		Spec:         spec,
	}
}
