package webhook

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Keys of the CA Secret.
const (
	SecretKeyCACert         = "ca-cert.pem"
	SecretKeyCAKey          = "ca-key.pem"
	SecretKeyPreviousCACert = "previous-ca-cert.pem"
)

// maxSecretAttempts bounds the create/update races with other replicas.
const maxSecretAttempts = 5

// syncSecret reads the CA from its Secret, creating the Secret when it is
// missing and replacing the CA when it is unreadable or close to expiry.
// Writes are conditional (create fails if it exists, update carries the
// resourceVersion), so replicas racing each other all end up reading the
// one CA that won.
func (m *CertManager) syncSecret(ctx context.Context, now time.Time) (*authority, []byte, error) {
	secrets := m.opts.Client.CoreV1().Secrets(m.opts.Namespace)
	for range maxSecretAttempts {
		secret, err := secrets.Get(ctx, m.opts.SecretName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			ca, err := newAuthority(m.caCommonName(), now, m.opts.CAValidity)
			if err != nil {
				return nil, nil, err
			}
			_, err = secrets.Create(ctx, m.caSecret(ca, nil), metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				continue // another replica got there first; use its CA
			}
			if err != nil {
				return nil, nil, fmt.Errorf("creating Secret %s/%s: %w", m.opts.Namespace, m.opts.SecretName, err)
			}
			m.log.Info("created the webhook CA", "secret", m.opts.SecretName, "notAfter", ca.cert.NotAfter)
			return ca, nil, nil
		}
		if err != nil {
			return nil, nil, fmt.Errorf("reading Secret %s/%s: %w", m.opts.Namespace, m.opts.SecretName, err)
		}
		current, parseErr := parseAuthority(secret.Data[SecretKeyCACert], secret.Data[SecretKeyCAKey])
		if parseErr == nil && !m.caExpiring(current, now) {
			return current, secret.Data[SecretKeyPreviousCACert], nil
		}
		ca, err := newAuthority(m.caCommonName(), now, m.opts.CAValidity)
		if err != nil {
			return nil, nil, err
		}
		var previous []byte
		if parseErr == nil {
			previous = current.certPEM
			m.log.Info("rotating the webhook CA", "secret", m.opts.SecretName, "oldNotAfter", current.cert.NotAfter)
		} else {
			m.log.Warn("replacing an unreadable webhook CA", "secret", m.opts.SecretName, "error", parseErr)
		}
		updated := secret.DeepCopy()
		updated.Data = m.caSecret(ca, previous).Data
		_, err = secrets.Update(ctx, updated, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue // another replica rotated it; read theirs
		}
		if err != nil {
			return nil, nil, fmt.Errorf("updating Secret %s/%s: %w", m.opts.Namespace, m.opts.SecretName, err)
		}
		return ca, previous, nil
	}
	return nil, nil, fmt.Errorf("Secret %s/%s kept changing under us after %d attempts",
		m.opts.Namespace, m.opts.SecretName, maxSecretAttempts)
}

func (m *CertManager) caSecret(ca *authority, previous []byte) *corev1.Secret {
	data := map[string][]byte{SecretKeyCACert: ca.certPEM, SecretKeyCAKey: ca.keyPEM}
	if len(previous) > 0 {
		data[SecretKeyPreviousCACert] = previous
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      m.opts.SecretName,
			Namespace: m.opts.Namespace,
			Labels: map[string]string{
				"app.kubernetes.io/managed-by": "meshpilot",
				revisionLabel:                  RevisionLabelValue(m.opts.Revision),
			},
		},
		Type: corev1.SecretTypeOpaque,
		Data: data,
	}
}
