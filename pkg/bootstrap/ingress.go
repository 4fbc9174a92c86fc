package bootstrap

import (
	"cmp"
	"context"
	"sync"

	"github.com/meshpilot/meshpilot/pkg/controllers"
	"github.com/meshpilot/meshpilot/pkg/model"
	"github.com/meshpilot/meshpilot/pkg/pushcontext"
)

// ingressWriteBack reports what the control plane concludes about
// Ingresses: every replica logs and counts their problems; with a
// Kubernetes source, status addresses and problem Events are also written
// back to the API, by one replica only, the holder of the Lease, unless
// leader election is off.
//
// Its Lease also elects the writer of the control plane's other shared
// objects; leaderOnly (writers.go) registers them. What belongs to one
// revision alone (its webhooks' caBundle) is elected by a second Lease, one
// per revision (revisionLeaderOnly): revisions installed side by side share
// the first Lease, and its holder patches only its own revision's webhooks.
type ingressWriteBack struct {
	problems *controllers.IngressProblemReporter
	// status, leader and revisionLeader are nil without a Kubernetes
	// source.
	status         *controllers.IngressStatusWriter
	leader         *controllers.LeaderElector
	revisionLeader *controllers.LeaderElector
	// unelected are the leader-only writers, run all the time when leader
	// election is off (a single replica).
	unelected []func(context.Context)
}

// revisionLeasePrefix names the per-revision Lease:
// meshpilot-webhook-cabundle-<revision>, "default" for the default revision
// (a name no revision may take).
const revisionLeasePrefix = "meshpilot-webhook-cabundle-"

// revisionLeaseName is the Lease that elects, among the replicas of one
// revision, the writer of that revision's own objects.
func revisionLeaseName(revision string) string {
	return revisionLeasePrefix + cmp.Or(revision, "default")
}

func ingressOwnership(o *Options) model.IngressOwnership {
	return model.IngressOwnership{Class: o.Ingress.Class, Mode: o.Ingress.Mode}
}

// pushContextOptions are the push-context options that o's settings make.
func pushContextOptions(o *Options) pushcontext.Options {
	return pushcontext.Options{
		DomainSuffix:    o.DomainSuffix,
		RootNamespace:   o.RootNamespace,
		TrustDomain:     o.TrustDomain,
		DisableAutoMTLS: o.DisableAutoMTLS,
		// The control plane's namespace, as istiod reads the cluster's
		// network from its own.
		SystemNamespace: o.Webhook.Namespace,
		Ingress: pushcontext.IngressOptions{
			Ownership:       ingressOwnership(o),
			GatewayService:  o.Ingress.Service,
			GatewaySelector: o.Ingress.Selector,
		},
	}
}

func (s *Server) newIngressWriteBack() (*ingressWriteBack, error) {
	metrics := controllers.NewIngressStatusMetrics(s.registry)
	// Without a Kubernetes client the reporter only logs and counts.
	problems, err := controllers.NewIngressProblemReporter(controllers.IngressProblemOptions{
		Client: s.kube, Logger: s.log, Metrics: metrics,
	})
	if err != nil {
		return nil, err
	}
	wb := &ingressWriteBack{problems: problems}
	if s.kube == nil {
		return wb, nil
	}
	wb.status, err = controllers.NewIngressStatusWriter(controllers.IngressStatusOptions{
		Client:         s.kube,
		Store:          s.store,
		Ownership:      ingressOwnership(&s.opts),
		GatewayService: s.opts.Ingress.Service,
		Synced:         s.kubeSynced,
		Logger:         s.log,
		Metrics:        metrics,
	})
	if err != nil {
		return nil, err
	}
	if le := s.opts.LeaderElection; le.Enabled {
		elector := func(name string) (*controllers.LeaderElector, error) {
			return controllers.NewLeaderElector(controllers.LeaderOptions{
				Client:        s.kube,
				Namespace:     le.Namespace,
				Name:          name,
				Identity:      le.Identity,
				LeaseDuration: le.LeaseDuration,
				RenewDeadline: le.RenewDeadline,
				RetryPeriod:   le.RetryPeriod,
				Logger:        s.log,
				Metrics:       metrics,
			})
		}
		if wb.leader, err = elector(le.Name); err != nil {
			return nil, err
		}
		if wb.revisionLeader, err = elector(revisionLeaseName(s.opts.Revision)); err != nil {
			return nil, err
		}
	}
	wb.leaderOnly(wb.status.Run)
	wb.leaderOnly(problems.Run)
	return wb, nil
}

// leaderOnly has fn run during each term this replica leads, or for the
// whole run when leader election is off. Call it before run.
func (wb *ingressWriteBack) leaderOnly(fn func(context.Context)) {
	if wb.leader != nil {
		wb.leader.AddRunFunction(fn)
		return
	}
	wb.unelected = append(wb.unelected, fn)
}

// revisionLeaderOnly has fn run during each term this replica leads its
// revision (the per-revision Lease), or for the whole run when leader
// election is off. Call it before run.
func (wb *ingressWriteBack) revisionLeaderOnly(fn func(context.Context)) {
	if wb.revisionLeader != nil {
		wb.revisionLeader.AddRunFunction(fn)
		return
	}
	wb.unelected = append(wb.unelected, fn)
}

// run writes back until ctx ends: while leading, or always without election.
func (wb *ingressWriteBack) run(ctx context.Context) {
	if wb.status == nil {
		return // nothing to write to
	}
	var wg sync.WaitGroup
	if wb.leader != nil {
		wg.Go(func() { wb.leader.Run(ctx) })
		wg.Go(func() { wb.revisionLeader.Run(ctx) })
	}
	for _, fn := range wb.unelected {
		wg.Go(func() { fn(ctx) })
	}
	wg.Wait()
}

// onBuild hands every new push context's Ingress problems to the reporter.
func (s *Server) onBuild(pc *pushcontext.PushContext) {
	s.writeBack.problems.Report(pc.IngressProblems())
}
