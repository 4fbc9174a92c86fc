package webhook

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
)

// maxReviewBytes bounds a review body: an object plus its old version, each
// at most etcd's 1.5 MiB request limit, with room for the envelope.
const maxReviewBytes = 7 << 20

// requestError is a malformed request: it gets an HTTP error, not a review
// response, because there is no review to answer.
type requestError struct {
	code int
	msg  string
}

func (e *requestError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &requestError{code: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

// readReview decodes an admission.k8s.io/v1 AdmissionReview request.
func readReview(w http.ResponseWriter, r *http.Request) (*admissionv1.AdmissionReview, error) {
	if r.Method != http.MethodPost {
		return nil, &requestError{code: http.StatusMethodNotAllowed, msg: "admission reviews must be POSTed"}
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			return nil, &requestError{code: http.StatusUnsupportedMediaType,
				msg: fmt.Sprintf("content type %q is not application/json", ct)}
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxReviewBytes))
	if err != nil {
		if tooBig := (*http.MaxBytesError)(nil); errors.As(err, &tooBig) {
			return nil, &requestError{code: http.StatusRequestEntityTooLarge,
				msg: fmt.Sprintf("admission review is larger than %d bytes", tooBig.Limit)}
		}
		return nil, badRequest("reading the request body: %v", err)
	}
	if len(body) == 0 {
		return nil, badRequest("empty request body: expected an admission.k8s.io/v1 AdmissionReview")
	}
	review := &admissionv1.AdmissionReview{}
	if err := json.Unmarshal(body, review); err != nil {
		return nil, badRequest("decoding the AdmissionReview: %v", err)
	}
	if gvk := review.GroupVersionKind(); gvk != admissionv1.SchemeGroupVersion.WithKind("AdmissionReview") {
		return nil, badRequest("expected apiVersion admission.k8s.io/v1 and kind AdmissionReview, got apiVersion %q kind %q",
			review.APIVersion, review.Kind)
	}
	if review.Request == nil {
		return nil, badRequest("the AdmissionReview has no request")
	}
	if review.Request.UID == "" {
		return nil, badRequest("the AdmissionReview request has no uid")
	}
	return review, nil
}

// writeReview answers a review with resp, echoing the request's uid and the
// review's apiVersion and kind, as the API server requires.
func writeReview(w http.ResponseWriter, review *admissionv1.AdmissionReview, resp *admissionv1.AdmissionResponse) error {
	resp.UID = review.Request.UID
	out := admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: resp}
	body, err := json.Marshal(&out)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	_, err = w.Write(body)
	return err
}

// writeRequestError reports a malformed request as plain text.
func writeRequestError(w http.ResponseWriter, err error) {
	code := http.StatusBadRequest
	var re *requestError
	if errors.As(err, &re) {
		code = re.code
	}
	if code == http.StatusMethodNotAllowed {
		w.Header().Set("Allow", http.MethodPost)
	}
	http.Error(w, err.Error(), code)
}
