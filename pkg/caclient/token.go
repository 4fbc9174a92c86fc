package caclient

import (
	"context"
	"fmt"
	"os"
	"strings"

	"google.golang.org/grpc/credentials"
)

// BearerToken authenticates every call on a connection with a
// ServiceAccount token, as Istio's agents and ztunnel do towards 15012:
// the CA and the xDS server both accept it. source is asked on each call,
// so a projected token that the kubelet rotates is always current.
func BearerToken(source func(ctx context.Context) (string, error)) credentials.PerRPCCredentials {
	return bearer(source)
}

type bearer func(ctx context.Context) (string, error)

func (b bearer) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	token, err := b(ctx)
	if err != nil {
		return nil, fmt.Errorf("caclient: token: %w", err)
	}
	return map[string]string{"authorization": "Bearer " + token}, nil
}

// RequireTransportSecurity: a token is a credential, never sent in the
// clear.
func (bearer) RequireTransportSecurity() bool { return true }

// TokenFile reads the token at path on each call (a projected
// ServiceAccount token, /var/run/secrets/tokens/istio-token in Istio's
// layout).
func TokenFile(path string) func(context.Context) (string, error) {
	return func(context.Context) (string, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", err
		}
		token := strings.TrimSpace(string(b))
		if token == "" {
			return "", fmt.Errorf("%s is empty", path)
		}
		return token, nil
	}
}
