package controllers

import (
	"os"
	"testing"

	clientfeatures "k8s.io/client-go/features"
)

type allGates struct{}

func (allGates) Enabled(clientfeatures.Feature) bool { return true }

// The informers of this process start with a LIST (see kube_lists.go), and
// client-go's other gates keep their values.
func TestInformersStartWithAList(t *testing.T) {
	if v, set := os.LookupEnv(watchListEnv); set {
		t.Skipf("%s=%s is set, and chooses for the process", watchListEnv, v)
	}
	if clientfeatures.FeatureGates().Enabled(clientfeatures.WatchListClient) {
		t.Error("informers would start with a streaming watch-list")
	}
	g := listGates{allGates{}}
	if g.Enabled(clientfeatures.WatchListClient) {
		t.Error("listGates lets WatchListClient through")
	}
	if !g.Enabled(clientfeatures.InformerResourceVersion) {
		t.Error("listGates turns off a gate other than WatchListClient")
	}
}
