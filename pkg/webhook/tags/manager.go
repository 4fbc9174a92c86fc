package tags

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/kubernetes"
	typedadmissionv1 "k8s.io/client-go/kubernetes/typed/admissionregistration/v1"
	"k8s.io/client-go/util/retry"
)

// Options configure a Manager.
type Options struct {
	// Kube is the client of the cluster whose tags are managed.
	Kube kubernetes.Interface
	// IstioNamespace is the control plane's namespace; it only changes object
	// names when it is not istio-system (see InjectorName). Empty means
	// istio-system.
	IstioNamespace string
}

// Manager creates, lists and removes revision tags in a cluster.
type Manager struct {
	kube      kubernetes.Interface
	namespace string
}

// NewManager returns a Manager for opts.
func NewManager(opts Options) *Manager {
	ns := opts.IstioNamespace
	if ns == "" {
		ns = IstioSystem
	}
	return &Manager{kube: opts.Kube, namespace: ns}
}

// SetResult says what Set changed.
type SetResult struct {
	// Webhook is the tag's configuration; empty when the default tag was
	// handed back to the non-revisioned injector.
	Webhook string
	// Created is true when the tag did not exist before.
	Created bool
	// PreviousRevision is the revision the tag pointed to before, if any.
	PreviousRevision string
	// Deactivated names the non-revisioned injector that Set deactivated.
	Deactivated string
	// Restored names the non-revisioned injector that Set reactivated.
	Restored string
	// Deleted names a tag configuration that Set removed because the
	// restored injector now serves the tag.
	Deleted string
}

// TagInfo describes one tag for listing.
type TagInfo struct {
	Tag        string   `json:"tag"`
	Revision   string   `json:"revision"`
	Webhook    string   `json:"webhook"`
	Namespaces []string `json:"namespaces"`
}

// RemoveResult says what Remove changed.
type RemoveResult struct {
	Webhook string
	// Restored names the non-revisioned injector that took the default tag
	// back.
	Restored string
	// Namespaces still labelled for the tag (removed anyway with force, or
	// served by the restored injector).
	Namespaces []string
}

func (m *Manager) webhooks() typedadmissionv1.MutatingWebhookConfigurationInterface {
	return m.kube.AdmissionregistrationV1().MutatingWebhookConfigurations()
}

// Set points tag at revision rev, creating the tag if needed. Retargeting
// an existing tag to another revision needs overwrite. For the default tag
// Set also deactivates the non-revisioned injector, which would otherwise
// inject the same pods; pointing default at the default revision instead
// reactivates that injector and deletes the tag's own configuration.
func (m *Manager) Set(ctx context.Context, tag, rev string, overwrite bool) (SetResult, error) {
	rev = NormalizeRevision(rev)
	if err := ValidateTag(tag); err != nil {
		return SetResult{}, err
	}
	if err := ValidateRevision(rev); err != nil {
		return SetResult{}, err
	}
	if tag != DefaultTag {
		if err := m.checkNotARevision(ctx, tag); err != nil {
			return SetResult{}, err
		}
	}
	injectorName := InjectorName(rev, m.namespace)
	injector, err := m.webhooks().Get(ctx, injectorName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return SetResult{}, &RevisionNotFoundError{Revision: rev, Injector: injectorName}
	}
	if err != nil {
		return SetResult{}, fmt.Errorf("read injector of revision %q: %w", rev, err)
	}
	if err := CheckInjector(injector); err != nil {
		return SetResult{}, fmt.Errorf("revision %q: %w", rev, err)
	}

	name := TagWebhookName(tag, m.namespace)
	existing, err := m.webhooks().Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		existing = nil
	case err != nil:
		return SetResult{}, fmt.Errorf("read tag %q: %w", tag, err)
	}
	res := SetResult{Created: existing == nil}
	if existing != nil {
		res.PreviousRevision = existing.Labels[LabelRev]
		if res.PreviousRevision != rev && !overwrite {
			return SetResult{}, &TagExistsError{Tag: tag, CurrentRevision: res.PreviousRevision, WantedRevision: rev}
		}
	}

	if tag == DefaultTag && rev == DefaultRevision {
		return m.returnDefaultToInjector(ctx, existing, res)
	}

	want := BuildTagWebhook(tag, rev, injector)
	want.Name = name
	if existing == nil {
		_, err = m.webhooks().Create(ctx, want, metav1.CreateOptions{})
	} else {
		err = m.replaceWebhooks(ctx, name, want)
	}
	if err != nil {
		return SetResult{}, fmt.Errorf("write tag %q: %w", tag, err)
	}
	res.Webhook = name

	// Deactivating after the tag exists leaves a moment where both match
	// (injection is idempotent) rather than one where neither does.
	if tag == DefaultTag {
		deactivated, err := m.updateDefaultInjector(ctx, Deactivate)
		if err != nil {
			return res, fmt.Errorf("tag %q is set, but deactivating the non-revisioned injector failed: %w", tag, err)
		}
		res.Deactivated = deactivated
	}
	return res, nil
}

// returnDefaultToInjector makes the non-revisioned injector serve the
// default tag again and drops the tag configuration that stood in for it.
func (m *Manager) returnDefaultToInjector(ctx context.Context, existing *admissionregistrationv1.MutatingWebhookConfiguration, res SetResult) (SetResult, error) {
	restored, err := m.updateDefaultInjector(ctx, Restore)
	if err != nil {
		return SetResult{}, fmt.Errorf("restore the non-revisioned injector: %w", err)
	}
	res.Restored = restored
	res.Created = false
	if existing != nil {
		if err := m.deleteWebhook(ctx, existing.Name); err != nil {
			return res, err
		}
		res.Deleted = existing.Name
	}
	return res, nil
}

// Remove deletes tag. It refuses while namespaces are labelled for the tag
// unless force is set; for the default tag, namespaces are not stranded when
// the non-revisioned injector exists, since removing the tag restores it.
func (m *Manager) Remove(ctx context.Context, tag string, force bool) (RemoveResult, error) {
	if err := ValidateTag(tag); err != nil {
		return RemoveResult{}, err
	}
	name := TagWebhookName(tag, m.namespace)
	if _, err := m.webhooks().Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		return RemoveResult{}, &TagNotFoundError{Tag: tag, Webhook: name}
	} else if err != nil {
		return RemoveResult{}, fmt.Errorf("read tag %q: %w", tag, err)
	}
	namespaces, err := m.NamespacesUsing(ctx, tag)
	if err != nil {
		return RemoveResult{}, err
	}
	res := RemoveResult{Webhook: name, Namespaces: namespaces}
	fallback := false
	if tag == DefaultTag {
		_, err := m.webhooks().Get(ctx, InjectorName(DefaultRevision, m.namespace), metav1.GetOptions{})
		switch {
		case err == nil:
			fallback = true
		case !apierrors.IsNotFound(err):
			return RemoveResult{}, fmt.Errorf("read the non-revisioned injector: %w", err)
		}
	}
	if len(namespaces) > 0 && !force && !fallback {
		return RemoveResult{}, &TagInUseError{Tag: tag, Namespaces: namespaces}
	}
	// Restore before deleting, for the same reason Set deactivates after
	// creating: an overlap is harmless, a gap is not.
	if fallback {
		if res.Restored, err = m.updateDefaultInjector(ctx, Restore); err != nil {
			return RemoveResult{}, fmt.Errorf("restore the non-revisioned injector: %w", err)
		}
	}
	if err := m.deleteWebhook(ctx, name); err != nil {
		return res, err
	}
	return res, nil
}

// List returns every tag in the cluster, sorted by name.
func (m *Manager) List(ctx context.Context) ([]TagInfo, error) {
	list, err := m.webhooks().List(ctx, metav1.ListOptions{LabelSelector: LabelTag})
	if err != nil {
		return nil, fmt.Errorf("list tags: %w", err)
	}
	infos := make([]TagInfo, 0, len(list.Items))
	for _, wh := range list.Items {
		tag := wh.Labels[LabelTag]
		namespaces, err := m.NamespacesUsing(ctx, tag)
		if err != nil {
			return nil, err
		}
		infos = append(infos, TagInfo{Tag: tag, Revision: wh.Labels[LabelRev], Webhook: wh.Name, Namespaces: namespaces})
	}
	slices.SortFunc(infos, func(a, b TagInfo) int {
		return cmp.Or(cmp.Compare(a.Tag, b.Tag), cmp.Compare(a.Webhook, b.Webhook))
	})
	return infos, nil
}

// NamespacesUsing returns the sorted names of the namespaces that opt into
// injection through tag: istio.io/rev=TAG, and for the default tag also
// istio-injection=enabled.
func (m *Manager) NamespacesUsing(ctx context.Context, tag string) ([]string, error) {
	selectors := []string{LabelRev + "=" + tag}
	if tag == DefaultTag {
		selectors = append(selectors, LabelInjection+"=enabled")
	}
	var names []string
	for _, sel := range selectors {
		list, err := m.kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return nil, fmt.Errorf("list namespaces using tag %q: %w", tag, err)
		}
		for _, ns := range list.Items {
			names = append(names, ns.Name)
		}
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// checkNotARevision refuses a tag named like an installed revision: the
// revision's own webhooks already match istio.io/rev=TAG.
func (m *Manager) checkNotARevision(ctx context.Context, tag string) error {
	revIs, err := labels.NewRequirement(LabelRev, selection.Equals, []string{tag})
	if err != nil {
		return err
	}
	notATag, err := labels.NewRequirement(LabelTag, selection.DoesNotExist, nil)
	if err != nil {
		return err
	}
	list, err := m.webhooks().List(ctx, metav1.ListOptions{
		LabelSelector: labels.NewSelector().Add(*revIs, *notATag).String(),
	})
	if err != nil {
		return fmt.Errorf("look for a revision named %q: %w", tag, err)
	}
	if len(list.Items) > 0 {
		return &TagShadowsRevisionError{Tag: tag, Injector: list.Items[0].Name}
	}
	return nil
}

// replaceWebhooks makes the existing configuration name look like want,
// keeping labels and annotations that others put there.
func (m *Manager) replaceWebhooks(ctx context.Context, name string, want *admissionregistrationv1.MutatingWebhookConfiguration) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := m.webhooks().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.Labels == nil {
			cur.Labels = map[string]string{}
		}
		for k, v := range want.Labels {
			cur.Labels[k] = v
		}
		cur.Webhooks = want.Webhooks
		_, err = m.webhooks().Update(ctx, cur, metav1.UpdateOptions{})
		return err
	})
}

// updateDefaultInjector applies change (Deactivate or Restore) to the
// non-revisioned injector and returns its name, or "" when there is no such
// injector (a cluster installed with revisions only) or nothing changed.
func (m *Manager) updateDefaultInjector(ctx context.Context, change func(*admissionregistrationv1.MutatingWebhookConfiguration) (*admissionregistrationv1.MutatingWebhookConfiguration, error)) (string, error) {
	name := InjectorName(DefaultRevision, m.namespace)
	changed := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := m.webhooks().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		next, err := change(cur)
		if err != nil {
			return err
		}
		if IsDeactivated(next) == IsDeactivated(cur) {
			return nil
		}
		if _, err := m.webhooks().Update(ctx, next, metav1.UpdateOptions{}); err != nil {
			return err
		}
		changed = true
		return nil
	})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil || !changed {
		return "", err
	}
	return name, nil
}

func (m *Manager) deleteWebhook(ctx context.Context, name string) error {
	err := m.webhooks().Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete MutatingWebhookConfiguration %s: %w", name, err)
	}
	return nil
}
