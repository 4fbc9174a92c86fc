package bootstrap

import (
	"context"
	"fmt"

	istioclient "istio.io/client-go/pkg/clientset/versioned"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/meshpilot/meshpilot/pkg/controllers"
	"github.com/meshpilot/meshpilot/pkg/model"
)

// source is what bootstrap needs of a config source.
type source interface {
	Name() string
	Run(ctx context.Context) error
	HasSynced() bool
	// Synced is closed when HasSynced turns true, so that the first push
	// context is built the moment the last source syncs.
	Synced() <-chan struct{}
}

func (s *Server) newSources(store model.Store, metrics *controllers.Metrics) ([]source, error) {
	// One ingester for all sources, so that an EndpointSlice from one source
	// resolves a Pod reported by the other.
	ingester := controllers.NewIngester(controllers.IngesterOptions{Store: store, DomainSuffix: s.opts.DomainSuffix})
	var sources []source
	if s.opts.ConfigDir != "" {
		src, err := controllers.NewFileSource(controllers.FileSourceOptions{
			Dir:          s.opts.ConfigDir,
			Store:        store,
			DomainSuffix: s.opts.DomainSuffix,
			Logger:       s.log,
			Metrics:      metrics,
			Ingester:     ingester,
		})
		if err != nil {
			return nil, err
		}
		sources = append(sources, src)
	}
	if s.opts.Kubeconfig != "" || s.opts.InCluster {
		cfg, err := restConfig(s.opts.Kubeconfig)
		if err != nil {
			return nil, err
		}
		kube, err := kubernetes.NewForConfig(controllers.BuiltinKindsConfig(cfg))
		if err != nil {
			return nil, fmt.Errorf("kubernetes client: %w", err)
		}
		istio, err := istioclient.NewForConfig(cfg)
		if err != nil {
			return nil, fmt.Errorf("istio client: %w", err)
		}
		meta, err := metadata.NewForConfig(cfg)
		if err != nil {
			return nil, fmt.Errorf("metadata client: %w", err)
		}
		s.kube = kube
		src, err := controllers.NewKubeSource(controllers.KubeSourceOptions{
			Client:         kube,
			IstioClient:    istio,
			MetadataClient: meta,
			Store:          store,
			DomainSuffix:   s.opts.DomainSuffix,
			Logger:         s.log,
			Metrics:        metrics,
			Ingester:       ingester,
		})
		if err != nil {
			return nil, err
		}
		s.kubeSynced = src.Synced()
		sources = append(sources, src)
	}
	return sources, nil
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	var (
		cfg *rest.Config
		err error
	)
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes config: %w", err)
	}
	// The informers list thousands of objects at start; the client's default
	// of 5 QPS would make the first sync crawl.
	cfg.QPS, cfg.Burst = 100, 200
	cfg.UserAgent = "meshpilot"
	controllers.RetryRefusedReads(cfg)
	return cfg, nil
}
