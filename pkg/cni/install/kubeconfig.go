package install

import (
	"fmt"
	"net"
	"os"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// In-cluster locations of the installer pod's own ServiceAccount.
const (
	ServiceAccountTokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"
	ServiceAccountCAFile    = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
)

// KubeconfigSource is what the plugin's kubeconfig is made of: the API
// server and the installer's own ServiceAccount credentials. The plugin
// runs on the host, where the pod's files are not mounted, so the token
// and CA are copied into the file.
type KubeconfigSource struct {
	Server    string // https://host:port
	CAFile    string
	TokenFile string
}

// InClusterKubeconfig is the source for an installer running in a pod.
func InClusterKubeconfig() (*KubeconfigSource, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, fmt.Errorf("not in a pod: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are unset")
	}
	return &KubeconfigSource{Server: "https://" + net.JoinHostPort(host, port),
		CAFile: ServiceAccountCAFile, TokenFile: ServiceAccountTokenFile}, nil
}

// write writes the kubeconfig, readable by root only: it holds a token.
func (s *KubeconfigSource) write(path string) error {
	ca, err := os.ReadFile(s.CAFile)
	if err != nil {
		return err
	}
	token, err := os.ReadFile(s.TokenFile)
	if err != nil {
		return err
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["local"] = &clientcmdapi.Cluster{Server: s.Server, CertificateAuthorityData: ca}
	kc.AuthInfos["meshpilot-cni"] = &clientcmdapi.AuthInfo{Token: string(token)}
	kc.Contexts["meshpilot-cni"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "meshpilot-cni"}
	kc.CurrentContext = "meshpilot-cni"
	data, err := clientcmd.Write(*kc)
	if err != nil {
		return err
	}
	return writeAtomic(path, data, 0o600)
}
