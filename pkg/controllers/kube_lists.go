package controllers

import (
	"os"

	clientfeatures "k8s.io/client-go/features"
)

// watchListEnv is how an operator sets client-go's WatchListClient gate.
const watchListEnv = "KUBE_FEATURE_" + string(clientfeatures.WatchListClient)

// The informers start with a LIST rather than a streaming watch-list
// (client-go's WatchListClient, on by default since 1.35). The streaming
// form sends every object as an event of its own: restarting on 5,000
// Services and 5,000 EndpointSlices took 0.96–1.09 s from New to ready
// with it and 0.33–0.48 s with a LIST served from the API server's watch
// cache (BenchmarkRestartPopulated). Streaming saves the API server memory
// on huge lists, which the few kinds meshpilot watches do not make.
// Setting KUBE_FEATURE_WatchListClient chooses either way. The gates are
// process-wide and read when a client or informer is built, so they are
// replaced at init, before anything has read them (replacing them later
// works too, but client-go then logs an error).
func init() {
	if _, set := os.LookupEnv(watchListEnv); set {
		return
	}
	clientfeatures.ReplaceFeatureGates(listGates{clientfeatures.FeatureGates()})
}

// listGates are client-go's gates with WatchListClient off.
type listGates struct{ clientfeatures.Gates }

func (g listGates) Enabled(f clientfeatures.Feature) bool {
	return f != clientfeatures.WatchListClient && g.Gates.Enabled(f)
}
