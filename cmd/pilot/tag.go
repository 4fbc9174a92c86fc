package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/meshpilot/meshpilot/pkg/webhook/tags"
)

// tagFlags are the flags every tag subcommand shares.
type tagFlags struct {
	kubeconfig     string
	istioNamespace string
}

func newTagCommand() *cobra.Command {
	flags := &tagFlags{}
	cmd := &cobra.Command{
		Use:   "tag",
		Short: "Manage revision tags: stable names for control-plane revisions",
		Long: `Manage revision tags. A tag such as "prod" is an alias of one control-plane
revision: namespaces labelled istio.io/rev=prod are injected by whichever
revision the tag points to, so an upgrade moves the tag instead of relabelling
every namespace. The tag "default" also takes the istio-injection=enabled and
sidecar.istio.io/inject=true opt-ins; making it point to a revision
deactivates (without deleting) the non-revisioned injector.

Pods keep the sidecar they were created with: restart workloads after moving
a tag for them to reach the new revision.`,
		Args: cobra.NoArgs,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&flags.kubeconfig, "kubeconfig", "", "kubeconfig of the cluster (default: $KUBECONFIG, ~/.kube/config, or the pod's service account)")
	pf.StringVar(&flags.istioNamespace, "istio-namespace", tags.IstioSystem, "namespace of the control plane whose injectors the tags copy")
	cmd.AddCommand(newTagSetCommand(flags), newTagListCommand(flags), newTagRemoveCommand(flags))
	return cmd
}

func newTagSetCommand(flags *tagFlags) *cobra.Command {
	var revision string
	var overwrite bool
	cmd := &cobra.Command{
		Use:   "set TAG --revision REV",
		Short: "Create a revision tag, or point it to another revision",
		Example: `  # Namespaces labelled istio.io/rev=prod are injected by revision 1-7-6
  pilot tag set prod --revision 1-7-6
  # Upgrade: new pods in those namespaces reach revision 1-8-1
  pilot tag set prod --revision 1-8-1 --overwrite
  # istio-injection=enabled namespaces are injected by revision 1-8-1
  pilot tag set default --revision 1-8-1
  # Hand the default tag back to the non-revisioned control plane
  pilot tag set default --revision default --overwrite`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := flags.manager()
			if err != nil {
				return err
			}
			tag := args[0]
			res, err := m.Set(cmd.Context(), tag, revision, overwrite)
			if err != nil {
				return err
			}
			printSetResult(cmd.OutOrStdout(), tag, tags.NormalizeRevision(revision), res)
			return nil
		},
	}
	cmd.Flags().StringVarP(&revision, "revision", "r", "", `control-plane revision the tag points to ("default" for the non-revisioned one)`)
	cmd.Flags().BoolVar(&overwrite, "overwrite", false, "retarget the tag if it already points to another revision")
	_ = cmd.MarkFlagRequired("revision")
	return cmd
}

func printSetResult(w io.Writer, tag, rev string, res tags.SetResult) {
	switch {
	case res.Webhook == "":
		fmt.Fprintf(w, "Tag %q is served by the non-revisioned injector again", tag)
		if res.Deleted != "" {
			fmt.Fprintf(w, "; removed %s", res.Deleted)
		}
		fmt.Fprintln(w)
	case res.Created:
		fmt.Fprintf(w, "Tag %q created for revision %q (MutatingWebhookConfiguration %s).\n", tag, rev, res.Webhook)
	case res.PreviousRevision != rev:
		fmt.Fprintf(w, "Tag %q moved from revision %q to %q. Restart workloads for new pods to use it.\n", tag, res.PreviousRevision, rev)
	default:
		fmt.Fprintf(w, "Tag %q refreshed from revision %q's injector.\n", tag, rev)
	}
	if res.Restored != "" {
		fmt.Fprintf(w, "Restored MutatingWebhookConfiguration %s.\n", res.Restored)
	}
	if res.Deactivated != "" {
		fmt.Fprintf(w, "Deactivated MutatingWebhookConfiguration %s (kept; removing the default tag restores it).\n", res.Deactivated)
	}
	if tag != tags.DefaultTag && res.Created {
		fmt.Fprintf(w, "Use it with: kubectl label namespace NAMESPACE %s=%s\n", tags.LabelRev, tag)
	}
}

func newTagListCommand(flags *tagFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List revision tags, their revisions and the namespaces using them",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, err := flags.manager()
			if err != nil {
				return err
			}
			infos, err := m.List(cmd.Context())
			if err != nil {
				return err
			}
			return tags.WriteTable(cmd.OutOrStdout(), infos)
		},
	}
}

func newTagRemoveCommand(flags *tagFlags) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "remove TAG",
		Short: "Remove a revision tag",
		Long: `Remove a revision tag. Namespaces labelled for the tag would lose injection, so
removal is refused while any exist unless --force is given. Removing the
default tag restores the non-revisioned injector, which then serves its
namespaces again.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := flags.manager()
			if err != nil {
				return err
			}
			tag := args[0]
			res, err := m.Remove(cmd.Context(), tag, force)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "Tag %q removed (MutatingWebhookConfiguration %s).\n", tag, res.Webhook)
			if res.Restored != "" {
				fmt.Fprintf(w, "Restored MutatingWebhookConfiguration %s.\n", res.Restored)
			}
			if len(res.Namespaces) > 0 && res.Restored == "" {
				fmt.Fprintf(w, "Warning: namespaces still labelled for the tag are no longer injected: %s\n", strings.Join(res.Namespaces, ", "))
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "remove the tag even while namespaces use it")
	return cmd
}

func (f *tagFlags) manager() (*tags.Manager, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = f.kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return tags.NewManager(tags.Options{Kube: kube, IstioNamespace: f.istioNamespace}), nil
}
