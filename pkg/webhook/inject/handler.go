package inject

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"sync/atomic"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// maxReviewBytes bounds an AdmissionReview body; the API server's own
// request limit is 3 MiB, and a Pod plus its old object fits well inside.
const maxReviewBytes = 8 << 20

// namespaceLookupTimeout bounds the API read of a namespace's labels.
const namespaceLookupTimeout = 5 * time.Second

// Handler answers sidecar injection AdmissionReviews.
type Handler struct {
	opts   Options
	config atomic.Pointer[injectionConfig]
}

var _ http.Handler = (*Handler)(nil)

// NewHandler loads the injection configuration from opts.ConfigDir and
// returns a handler serving it. It fails when the files cannot be read or
// parsed; a template that does not parse is kept, and every Pod that needs
// it fails admission with the template's error. Call Run to follow changes.
func NewHandler(opts Options) (*Handler, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	h := &Handler{opts: opts}
	if err := h.Reload(); err != nil {
		return nil, err
	}
	return h, nil
}

// ServeHTTP decodes one AdmissionReview and writes the review's response.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	defer func() { h.opts.Metrics.Duration.Observe(time.Since(start).Seconds()) }()

	if r.Method != http.MethodPost {
		http.Error(w, "inject: POST an AdmissionReview", http.StatusMethodNotAllowed)
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		http.Error(w, "inject: Content-Type must be application/json", http.StatusUnsupportedMediaType)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxReviewBytes))
	if err != nil {
		http.Error(w, "inject: read body: "+err.Error(), http.StatusRequestEntityTooLarge)
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil {
		http.Error(w, "inject: decode AdmissionReview: "+err.Error(), http.StatusBadRequest)
		return
	}
	if review.Request == nil {
		http.Error(w, "inject: AdmissionReview has no request", http.StatusBadRequest)
		return
	}

	resp := h.Review(r.Context(), review.Request)
	resp.UID = review.Request.UID
	out := admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: resp}
	if out.APIVersion == "" {
		out.APIVersion = admissionv1.SchemeGroupVersion.String()
		out.Kind = "AdmissionReview"
	}
	data, err := json.Marshal(out)
	if err != nil {
		http.Error(w, "inject: encode response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(data)
}

// Review answers one admission request: allowed unchanged, allowed with a
// JSONPatch that injects the sidecar, or denied with the reason injection
// failed (the webhook's failurePolicy then decides whether the Pod is still
// created).
func (h *Handler) Review(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	log := h.opts.Logger.With("namespace", req.Namespace, "name", req.Name, "uid", string(req.UID))
	if req.Kind.Group != "" || req.Kind.Kind != "Pod" || req.Operation != admissionv1.Create {
		// Only Pod creation is injected; anything else the webhook is
		// (mis)configured to send passes untouched.
		return h.skip(log, "not_pod_create")
	}
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		return h.fail(log, "decode", fmt.Errorf("decode Pod: %w", err))
	}
	if pod.Namespace == "" {
		pod.Namespace = req.Namespace
	}
	log = log.With("pod", podName(&pod.ObjectMeta))

	cfg := h.config.Load()
	nsLabels, err := h.namespaceLabels(ctx, pod.Namespace)
	if err != nil {
		return h.fail(log, "namespace", err)
	}
	decision := decide(decisionInput{
		pod:          &pod,
		nsLabels:     nsLabels,
		policy:       cfg.policy,
		revision:     h.opts.Revision,
		revisionTags: h.opts.RevisionTags,
		confirmTag:   h.confirmTag(ctx, log),
	})
	if decision != "" {
		return h.skip(log, decision)
	}

	patch, err := h.inject(cfg, &pod)
	if err != nil {
		return h.fail(log, "inject", err)
	}
	h.opts.Metrics.Requests.WithLabelValues(OutcomeInjected, "").Inc()
	log.Debug("injected sidecar", "patch_bytes", len(patch))
	patchType := admissionv1.PatchTypeJSONPatch
	return &admissionv1.AdmissionResponse{Allowed: true, Patch: patch, PatchType: &patchType}
}

// confirmTag binds Options.ConfirmRevisionTag to one request; nil without
// it.
func (h *Handler) confirmTag(ctx context.Context, log *slog.Logger) func(string) bool {
	if h.opts.ConfirmRevisionTag == nil {
		return nil
	}
	return func(tag string) bool {
		here, err := h.opts.ConfirmRevisionTag(ctx, tag)
		if err != nil {
			log.Warn("cannot confirm which revision the tag points at; trusting the webhook selectors", "tag", tag, "err", err)
			return true
		}
		if here {
			log.Info("revision tag points here, and the tag watch has not seen it yet", "tag", tag)
		}
		return here
	}
}

func (h *Handler) skip(log *slog.Logger, reason string) *admissionv1.AdmissionResponse {
	h.opts.Metrics.Requests.WithLabelValues(OutcomeSkipped, reason).Inc()
	log.Debug("sidecar not injected", "reason", reason)
	return &admissionv1.AdmissionResponse{Allowed: true}
}

func (h *Handler) fail(log *slog.Logger, reason string, err error) *admissionv1.AdmissionResponse {
	h.opts.Metrics.Requests.WithLabelValues(OutcomeFailed, reason).Inc()
	log.Error("sidecar injection failed", "reason", reason, "err", err)
	return &admissionv1.AdmissionResponse{
		Allowed: false,
		Result: &metav1.Status{
			Status:  metav1.StatusFailure,
			Message: "sidecar injection failed: " + err.Error(),
			Reason:  metav1.StatusReasonInvalid,
			Code:    http.StatusUnprocessableEntity,
		},
	}
}

// namespaceLabels asks the cache first and the API server when the cache
// does not know the namespace, so that a Pod created right after its
// labelled namespace is still judged by the namespace's labels.
func (h *Handler) namespaceLabels(ctx context.Context, namespace string) (map[string]string, error) {
	if h.opts.NamespaceLabels != nil {
		if labels := h.opts.NamespaceLabels(namespace); labels != nil {
			return labels, nil
		}
	}
	if h.opts.Kube == nil {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, namespaceLookupTimeout)
	defer cancel()
	ns, err := h.opts.Kube.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read labels of namespace %q: %w", namespace, err)
	}
	return ns.Labels, nil
}

func podName(meta *metav1.ObjectMeta) string {
	if meta.Name != "" {
		return meta.Name
	}
	if meta.GenerateName != "" {
		return meta.GenerateName + "*"
	}
	return ""
}
