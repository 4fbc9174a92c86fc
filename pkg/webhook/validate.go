package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/meshpilot/meshpilot/pkg/validation"
)

// ValidatePath is where the validation webhook is served.
const ValidatePath = "/validate"

// The API groups of the configs the webhook checks.
const (
	istioNetworkingGroup = "networking.istio.io"
	istioSecurityGroup   = "security.istio.io"
)

// validatedKind is an Istio kind the webhook checks: the versions it is
// served at (which share one spec) and what is wrong with an object of it.
type validatedKind struct {
	versions []string
	problems func(req *admissionv1.AdmissionRequest) (name string, problems []string)
}

// validatedKinds use the validators the controllers use to skip bad
// objects, so admission and ingestion always agree.
var validatedKinds = map[schema.GroupKind]validatedKind{
	{Group: istioNetworkingGroup, Kind: "DestinationRule"}: {
		versions: []string{"v1", "v1beta1", "v1alpha3"},
		problems: func(req *admissionv1.AdmissionRequest) (string, []string) {
			return reviewProblems(req, validation.DestinationRuleSpec, validation.ValidateDestinationRule)
		},
	},
	{Group: istioNetworkingGroup, Kind: "VirtualService"}: {
		versions: []string{"v1", "v1beta1", "v1alpha3"},
		problems: func(req *admissionv1.AdmissionRequest) (string, []string) {
			return reviewProblems(req, validation.VirtualServiceSpec, validation.ValidateVirtualService)
		},
	},
	{Group: istioSecurityGroup, Kind: "PeerAuthentication"}: {
		versions: []string{"v1", "v1beta1"},
		problems: func(req *admissionv1.AdmissionRequest) (string, []string) {
			return reviewProblems(req, validation.PeerAuthenticationSpec, validation.ValidatePeerAuthentication)
		},
	},
}

// ValidationOptions configure the validation handler.
type ValidationOptions struct {
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Metrics defaults to unregistered metrics.
	Metrics *Metrics
}

type validationHandler struct {
	log     *slog.Logger
	metrics *Metrics
}

// NewValidationHandler answers admission.k8s.io/v1 reviews of Istio
// configs: DestinationRules and VirtualServices (v1, v1beta1 and v1alpha3)
// and PeerAuthentications (v1 and v1beta1) are checked with the validation
// package, as the controllers check them, strictly (unknown fields and
// values of the wrong type are refused, by path); a denial lists every
// problem found. Deletes, and kinds or versions it does not validate, are
// allowed.
func NewValidationHandler(opts ValidationOptions) http.Handler {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(nil)
	}
	return &validationHandler{log: opts.Logger.With("component", "validation-webhook"), metrics: opts.Metrics}
}

func (h *validationHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	review, err := readReview(w, r)
	if err != nil {
		h.metrics.BadRequests.WithLabelValues(ValidatePath).Inc()
		h.log.Warn("malformed admission request", "error", err, "remote", r.RemoteAddr)
		writeRequestError(w, err)
		return
	}
	resp := h.review(review.Request)
	if err := writeReview(w, review, resp); err != nil {
		h.log.Warn("writing admission response", "error", err, "uid", review.Request.UID)
	}
}

// review decides one admission request.
func (h *validationHandler) review(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	kind := req.Kind.Kind
	h.metrics.ValidationRequests.WithLabelValues(metricKind(req), metricOperation(req.Operation)).Inc()
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return &admissionv1.AdmissionResponse{Allowed: true}
	}
	vk, ok := validatedKinds[schema.GroupKind{Group: req.Kind.Group, Kind: kind}]
	if !ok || !slices.Contains(vk.versions, req.Kind.Version) {
		return &admissionv1.AdmissionResponse{Allowed: true}
	}
	name, reasons := vk.problems(req)
	if len(reasons) == 0 {
		return &admissionv1.AdmissionResponse{Allowed: true}
	}
	h.metrics.ValidationDenials.WithLabelValues(kind).Inc()
	h.log.Info("denied invalid config", "kind", kind, "namespace", req.Namespace, "name", name,
		"operation", req.Operation, "problems", len(reasons))
	return deny(fmt.Sprintf("%s %q is invalid: %s", kind, objectRef(req.Namespace, name), strings.Join(reasons, "; ")))
}

// otherLabel stands in metrics for a kind or an operation the webhook does
// not know.
const otherLabel = "other"

// metricKind is the kind label of a review: the kind itself for the kinds
// the webhook validates, which are all the chart's webhook configurations
// send, and "other" for any other. The kind comes from the request body,
// and any pod can POST a review to the webhook port: a label taken from it
// unchecked would let a caller grow the metrics, and every scrape, without
// bound.
func metricKind(req *admissionv1.AdmissionRequest) string {
	if _, ok := validatedKinds[schema.GroupKind{Group: req.Kind.Group, Kind: req.Kind.Kind}]; ok {
		return req.Kind.Kind
	}
	return otherLabel
}

// metricOperation is the operation label of a review, bounded as
// metricKind is.
func metricOperation(op admissionv1.Operation) string {
	switch op {
	case admissionv1.Create, admissionv1.Update, admissionv1.Delete, admissionv1.Connect:
		return string(op)
	}
	return otherLabel
}

// reviewed is an Istio config object as the review carries it, its spec
// still JSON.
type reviewed struct {
	metav1.ObjectMeta `json:"metadata"`
	Spec              json.RawMessage `json:"spec"`
}

// topLevelFields are the fields an Istio config object may have.
var topLevelFields = map[string]bool{"apiVersion": true, "kind": true, "metadata": true, "spec": true, "status": true}

// reviewProblems decodes the object under review and returns its name and
// every problem with it, one message each: the fields a strict decoder
// refuses (unknown ones, or values of the wrong type for specType), then,
// once the spec decodes (into S, which decodes itself from JSON), what
// validate finds.
func reviewProblems[S any](req *admissionv1.AdmissionRequest, specType protoreflect.MessageDescriptor,
	validate func(name, namespace string, spec *S) error) (string, []string) {
	if len(req.Object.Raw) == 0 {
		return req.Name, []string{"the review carries no object"}
	}
	var obj reviewed
	if err := json.Unmarshal(req.Object.Raw, &obj); err != nil {
		return req.Name, []string{fmt.Sprintf("decoding the object: %v", err)}
	}
	name, namespace := reviewedName(req, &obj.ObjectMeta), obj.Namespace
	if namespace == "" {
		namespace = req.Namespace
	}
	shown := name
	if obj.Name == "" && req.Name == "" {
		shown = obj.GenerateName + "*"
	}
	// A CRD whose schema keeps unknown fields lets anything through to
	// here, and the spec's decoder would drop what it does not know.
	problems := strictProblems(req.Object.Raw, specType)
	var spec S
	if len(obj.Spec) > 0 {
		if err := json.Unmarshal(obj.Spec, &spec); err != nil {
			if len(problems) == 0 {
				problems = append(problems, fmt.Sprintf("decoding the spec: %v", err))
			}
			return shown, problems
		}
	}
	return shown, append(problems, splitProblems(validate(name, namespace, &spec))...)
}

// strictProblems lists the unknown fields of an object and the fields of
// its spec that do not hold what their type takes.
func strictProblems(raw []byte, specType protoreflect.MessageDescriptor) []string {
	var fields map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&fields); err != nil {
		return []string{fmt.Sprintf("decoding the object: %v", err)}
	}
	var problems []string
	for _, key := range slices.Sorted(maps.Keys(fields)) {
		if !topLevelFields[key] {
			problems = append(problems, key+": unknown field")
		}
	}
	for _, fe := range validation.FieldErrors(validation.CheckFields(specType, fields["spec"], "spec")) {
		problems = append(problems, fe.Error())
	}
	return problems
}

// reviewedName is the name to validate. A create with generateName may
// reach admission before the name exists; the prefix plus one character
// then stands for the generated name, whose suffix is always valid.
func reviewedName(req *admissionv1.AdmissionRequest, meta *metav1.ObjectMeta) string {
	switch {
	case meta.Name != "":
		return meta.Name
	case req.Name != "":
		return req.Name
	case meta.GenerateName != "":
		return meta.GenerateName + "x"
	}
	return ""
}

// splitProblems turns a validation error (usually joined) into one message
// per problem.
func splitProblems(err error) []string {
	if err == nil {
		return nil
	}
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []string{err.Error()}
	}
	errs := joined.Unwrap()
	out := make([]string, 0, len(errs))
	for _, e := range errs {
		out = append(out, e.Error())
	}
	return out
}

func objectRef(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

func deny(message string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{
		Allowed: false,
		Result: &metav1.Status{
			Status:  metav1.StatusFailure,
			Code:    http.StatusUnprocessableEntity,
			Reason:  metav1.StatusReasonInvalid,
			Message: message,
		},
	}
}
