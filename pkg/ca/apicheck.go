package ca

import (
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// ErrCAForbidden: the API server refused (403) a request the CA made to
// check a caller, because the CA's own ServiceAccount lacks a permission.
// It is neither the caller's fault nor a passing failure: every call that
// needs the permission fails alike until an operator grants it.
var ErrCAForbidden = errors.New("the API server refuses the CA a permission it needs")

// missingPermission is an ErrCAForbidden that names the permission as RBAC
// spells it ("get pods"), so the operator knows what to grant and the log
// can report each missing permission once rather than each call.
type missingPermission struct {
	permission string
	err        error // the API server's answer
}

func (e *missingPermission) Error() string {
	return fmt.Sprintf("%v (%s): %v", ErrCAForbidden, e.permission, e.err)
}

func (e *missingPermission) Is(target error) bool { return target == ErrCAForbidden }

func (e *missingPermission) Unwrap() error { return e.err }

// apiCheckFailed classifies the failure of a request the CA made to the API
// server to check a caller (what, for the message): a 403 is a permission
// the CA lacks; anything else (unreachable, overloaded, timed out) is
// ErrUnavailable, for the caller to retry.
func apiCheckFailed(permission, what string, err error) error {
	if apierrors.IsForbidden(err) {
		return &missingPermission{permission: permission, err: err}
	}
	return fmt.Errorf("%w: %s: %v", ErrUnavailable, what, err)
}
