package tags

import (
	"context"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// RevisionTagLister knows, from a watch, which tags point at one revision,
// so the injector can accept Pods that reach it through a tag without an
// API call per admission.
type RevisionTagLister struct {
	client   kubernetes.Interface
	revision string
	factory  informers.SharedInformerFactory
	informer cache.SharedIndexInformer
}

// NewRevisionTagLister watches the tag webhook configurations of revision
// rev ("" or "default" for the default revision).
func NewRevisionTagLister(client kubernetes.Interface, rev string) *RevisionTagLister {
	revision := NormalizeRevision(rev)
	selector := LabelRev + "=" + revision + "," + LabelTag
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	return &RevisionTagLister{client: client, revision: revision, factory: factory,
		informer: factory.Admissionregistration().V1().MutatingWebhookConfigurations().Informer()}
}

// Run watches until ctx ends.
func (l *RevisionTagLister) Run(ctx context.Context) {
	l.factory.Start(ctx.Done())
	<-ctx.Done()
	l.factory.Shutdown()
}

// Tags returns the tags that point at the revision, sorted, and whether
// the watch has synced: before it has, an empty list means nothing.
func (l *RevisionTagLister) Tags() ([]string, bool) {
	if !l.informer.HasSynced() {
		return nil, false
	}
	var tags []string
	for _, obj := range l.informer.GetStore().List() {
		if accessor, ok := obj.(interface{ GetLabels() map[string]string }); ok {
			if tag := accessor.GetLabels()[LabelTag]; tag != "" {
				tags = append(tags, tag)
			}
		}
	}
	slices.Sort(tags)
	return tags, true
}

// PointsHere asks the API server whether tag points at the revision now. It
// is for the one request the watch may be behind on: a tag just moved here,
// whose Pods the API server already sends to this revision.
func (l *RevisionTagLister) PointsHere(ctx context.Context, tag string) (bool, error) {
	selector := labels.SelectorFromSet(labels.Set{LabelTag: tag, LabelRev: l.revision})
	list, err := l.client.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx,
		metav1.ListOptions{LabelSelector: selector.String()})
	if err != nil {
		return false, err
	}
	return len(list.Items) > 0, nil
}
