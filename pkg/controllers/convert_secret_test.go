package controllers

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshpilot/meshpilot/pkg/model"
)

func TestConvertSecret(t *testing.T) {
	secret := func(typ corev1.SecretType, data map[string][]byte, stringData map[string]string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "cert", Namespace: "shop"},
			Type: typ, Data: data, StringData: stringData}
	}
	want := func(typ corev1.SecretType, cert, key, ca []byte) *model.Secret {
		return &model.Secret{Name: "cert", Namespace: "shop", Type: string(typ), Cert: cert, PrivateKey: key, CACert: ca}
	}
	cases := []struct {
		name   string
		in     *corev1.Secret
		want   *model.Secret
		wantOK bool
	}{
		{
			name:   "kubernetes tls keys",
			in:     secret(corev1.SecretTypeTLS, map[string][]byte{"tls.crt": []byte("C"), "tls.key": []byte("K"), "ca.crt": []byte("A")}, nil),
			want:   want(corev1.SecretTypeTLS, []byte("C"), []byte("K"), []byte("A")),
			wantOK: true,
		},
		{
			name: "istio generic keys",
			in: secret(corev1.SecretTypeOpaque,
				map[string][]byte{"cert": []byte("C"), "key": []byte("K"), "cacert": []byte("A"), "password": []byte("x")}, nil),
			want:   want(corev1.SecretTypeOpaque, []byte("C"), []byte("K"), []byte("A")),
			wantOK: true,
		},
		{
			name: "tls keys win over generic ones, key by key",
			in: secret(corev1.SecretTypeOpaque,
				map[string][]byte{"tls.crt": []byte("C1"), "cert": []byte("C2"), "key": []byte("K2"), "cacert": []byte("A2")}, nil),
			want:   want(corev1.SecretTypeOpaque, []byte("C1"), []byte("K2"), []byte("A2")),
			wantOK: true,
		},
		{
			name: "stringData wins over data as on the server",
			in: secret(corev1.SecretTypeTLS, map[string][]byte{"tls.crt": []byte("old"), "tls.key": []byte("K")},
				map[string]string{"tls.crt": "new"}),
			want:   want(corev1.SecretTypeTLS, []byte("new"), []byte("K"), nil),
			wantOK: true,
		},
		{
			name:   "present but empty differs from absent",
			in:     secret(corev1.SecretTypeTLS, map[string][]byte{"tls.crt": nil, "tls.key": {}}, nil),
			want:   want(corev1.SecretTypeTLS, []byte{}, []byte{}, nil),
			wantOK: true,
		},
		{
			name:   "only a CA is still a TLS secret",
			in:     secret(corev1.SecretTypeOpaque, map[string][]byte{"ca.crt": []byte("A")}, nil),
			want:   want(corev1.SecretTypeOpaque, nil, nil, []byte("A")),
			wantOK: true,
		},
		{
			name: "no tls keys",
			in:   secret(corev1.SecretTypeOpaque, map[string][]byte{"password": []byte("hunter2")}, nil),
			want: want(corev1.SecretTypeOpaque, nil, nil, nil),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ConvertSecret(tc.in)
			if ok != tc.wantOK {
				t.Errorf("ok = %v, want %v", ok, tc.wantOK)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
			for field, pair := range map[string][2][]byte{
				"Cert": {tc.want.Cert, got.Cert}, "PrivateKey": {tc.want.PrivateKey, got.PrivateKey},
				"CACert": {tc.want.CACert, got.CACert},
			} {
				if (pair[0] == nil) != (pair[1] == nil) {
					t.Errorf("%s nil = %v, want %v", field, pair[1] == nil, pair[0] == nil)
				}
			}
		})
	}
}

func TestSameSecret(t *testing.T) {
	base := func() *model.Secret {
		return &model.Secret{Name: "c", Namespace: "ns", Type: "kubernetes.io/tls", Cert: []byte("C"), PrivateKey: []byte("K")}
	}
	cases := []struct {
		name string
		mut  func(*model.Secret)
		same bool
	}{
		{name: "equal copies", mut: func(*model.Secret) {}, same: true},
		{name: "cert", mut: func(s *model.Secret) { s.Cert = []byte("C2") }},
		{name: "key", mut: func(s *model.Secret) { s.PrivateKey = []byte("K2") }},
		{name: "ca added empty", mut: func(s *model.Secret) { s.CACert = []byte{} }},
		{name: "type", mut: func(s *model.Secret) { s.Type = "Opaque" }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			other := base()
			tc.mut(other)
			if got := sameSecret(base(), other); got != tc.same {
				t.Errorf("sameSecret = %v, want %v", got, tc.same)
			}
		})
	}
}
