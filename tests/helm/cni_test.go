package helm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/meshpilot/meshpilot/internal/kubetest"
	"github.com/meshpilot/meshpilot/internal/pilotbin"
	"github.com/meshpilot/meshpilot/internal/xdstest"
	"github.com/meshpilot/meshpilot/pkg/cni/plugin"
)

// cniRelease is the release name the cni chart is rendered and installed as.
const cniRelease = "meshpilot-cni"

// cniCase is one testdata/cni/<name>.in.yaml: values of charts/cni.
type cniCase struct {
	name   string
	values map[string]any
}

func loadCNICases(t *testing.T) []cniCase {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "cni", "*.in.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no cni golden cases in testdata/cni (%v)", err)
	}
	var cases []cniCase
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		c := cniCase{name: strings.TrimSuffix(filepath.Base(f), ".in.yaml")}
		if err := yaml.UnmarshalStrict(raw, &c.values); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		cases = append(cases, c)
	}
	return cases
}

func (c cniCase) valuesFile(t *testing.T) string {
	t.Helper()
	raw, err := yaml.Marshal(c.values)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "cni-values.yaml")
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func (tl *tools) renderCNI(t *testing.T, c cniCase) string {
	t.Helper()
	return tl.run(t, "", tl.helm, "template", cniRelease, tl.chart("cni"), "--namespace", releaseNamespace,
		"-f", c.valuesFile(t))
}

// renderedDaemonSets decodes every rendered DaemonSet, by name.
func renderedDaemonSets(t *testing.T, rendered string) map[string]*appsv1.DaemonSet {
	t.Helper()
	out := map[string]*appsv1.DaemonSet{}
	for _, doc := range strings.Split(rendered, "\n---\n") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil || meta.Kind != "DaemonSet" {
			continue
		}
		var ds appsv1.DaemonSet
		if err := yaml.Unmarshal([]byte(doc), &ds); err != nil {
			t.Fatalf("DaemonSet: %v", err)
		}
		out[ds.Name] = &ds
	}
	return out
}

func TestCNITemplateGolden(t *testing.T) {
	tl := newTools(t)
	for _, c := range loadCNICases(t) {
		t.Run(c.name, func(t *testing.T) {
			got := "# charts/cni\n" + tl.renderCNI(t, c)
			xdstest.Golden(t, filepath.Join("testdata", "cni", c.name+".out.yaml"), []byte(got))
		})
	}
}

func TestCNIHelmLint(t *testing.T) {
	tl := newTools(t)
	tl.run(t, "", tl.helm, "lint", "--strict", tl.chart("cni"))
	tl.run(t, "", tl.helm, "lint", "--strict", tl.chart("cni"), "--set", "cni.enabled=false")
	tl.run(t, "", tl.helm, "lint", "--strict", tl.chart("cni"), "--set", "nodeProxy.enabled=false")
}

func TestCNITemplateRejectsUnknownCaptureBackend(t *testing.T) {
	tl := newTools(t)
	out, err := tl.try("", tl.helm, "template", "cni", tl.chart("cni"), "--namespace", releaseNamespace,
		"--set", "nodeProxy.captureBackend=ebpf")
	if err == nil {
		t.Fatalf("rendered without error:\n%s", out)
	}
	if want := `nodeProxy.captureBackend "ebpf": want nftables or iptables`; !strings.Contains(out, want) {
		t.Errorf("error does not say %q:\n%s", want, out)
	}
}

// TestCNIArgsParse has the real `pilot cni install` and `pilot nodeproxy`
// parse the arguments the chart renders, for each case.
func TestCNIArgsParse(t *testing.T) {
	tl := newTools(t)
	pilotBin := pilotbin.Path(t)
	for _, c := range loadCNICases(t) {
		t.Run(c.name, func(t *testing.T) {
			for name, ds := range renderedDaemonSets(t, tl.renderCNI(t, c)) {
				args := ds.Spec.Template.Spec.Containers[0].Args
				tl.run(t, "", pilotBin, append(args, "--help")...)
				t.Logf("%s: %v", name, args)
			}
		})
	}
}

// TestCNIDaemonSets checks what the nodes need from each DaemonSet, for the
// default values.
func TestCNIDaemonSets(t *testing.T) {
	tl := newTools(t)
	dss := renderedDaemonSets(t, tl.renderCNI(t, cniCase{name: "default", values: map[string]any{}}))
	installer, proxy := dss["meshpilot-cni"], dss["ztunnel"]
	if installer == nil || proxy == nil {
		t.Fatalf("DaemonSets rendered: %v", slices.Collect(func(yield func(string) bool) {
			for k := range dss {
				yield(k)
			}
		}))
	}
	for _, ds := range []*appsv1.DaemonSet{installer, proxy} {
		spec := ds.Spec.Template.Spec
		if spec.PriorityClassName != "system-node-critical" {
			t.Errorf("%s: priorityClassName %q", ds.Name, spec.PriorityClassName)
		}
		if !slices.ContainsFunc(spec.Tolerations, func(tol corev1.Toleration) bool {
			return tol.Key == "" && tol.Operator == corev1.TolerationOpExists && tol.Effect == ""
		}) {
			t.Errorf("%s does not tolerate every taint: %+v", ds.Name, spec.Tolerations)
		}
		if spec.TerminationGracePeriodSeconds == nil || *spec.TerminationGracePeriodSeconds < 15 {
			t.Errorf("%s: terminationGracePeriodSeconds %v", ds.Name, spec.TerminationGracePeriodSeconds)
		}
	}
	hostPaths := func(ds *appsv1.DaemonSet) map[string]string { // mountPath -> host path
		vols := map[string]string{}
		for _, v := range ds.Spec.Template.Spec.Volumes {
			if v.HostPath != nil {
				vols[v.Name] = v.HostPath.Path
			}
		}
		out := map[string]string{}
		for _, m := range ds.Spec.Template.Spec.Containers[0].VolumeMounts {
			if p, ok := vols[m.Name]; ok {
				out[m.MountPath] = p
			}
		}
		return out
	}
	for mount, host := range map[string]string{"/etc/cni/net.d": "/etc/cni/net.d", "/opt/cni/bin": "/opt/cni/bin"} {
		if got := hostPaths(installer)[mount]; got != host {
			t.Errorf("installer: %s mounts host %q, want %q", mount, got, host)
		}
	}
	for mount, host := range map[string]string{"/var/run/meshpilot": "/var/run/meshpilot", "/var/run/netns": "/var/run/netns"} {
		if got := hostPaths(proxy)[mount]; got != host {
			t.Errorf("node proxy: %s mounts host %q, want %q", mount, got, host)
		}
	}
	c := installer.Spec.Template.Spec.Containers[0]
	for _, want := range []string{"--cni-conf-dir=/etc/cni/net.d", "--cni-bin-dir=/opt/cni/bin", "--plugin-name=meshpilot-cni",
		"--exclude-namespaces=kube-system", "--agent-socket=/var/run/meshpilot/cni.sock"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("installer args %v lack %s", c.Args, want)
		}
	}

	spec := proxy.Spec.Template.Spec
	if spec.ServiceAccountName != "ztunnel" || !spec.HostPID {
		t.Errorf("node proxy: serviceAccountName %q, hostPID %v", spec.ServiceAccountName, spec.HostPID)
	}
	p := spec.Containers[0]
	for _, want := range []string{"--xds-address=istiod.istio-system.svc:15012", "--cni-socket=/var/run/meshpilot/cni.sock",
		"--token-file=/var/run/secrets/tokens/istio-token", "--ca-root-cert=/var/run/secrets/istio/root-cert.pem", "--http-addr=:15020"} {
		if !slices.Contains(p.Args, want) {
			t.Errorf("node proxy args %v lack %s", p.Args, want)
		}
	}
	env := map[string]string{}
	for _, e := range p.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			env[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	for name, path := range map[string]string{"NODE_NAME": "spec.nodeName", "POD_NAME": "metadata.name",
		"POD_NAMESPACE": "metadata.namespace", "INSTANCE_IP": "status.podIP"} {
		if env[name] != path {
			t.Errorf("node proxy env %s from %q, want %s", name, env[name], path)
		}
	}
	if r := p.ReadinessProbe; r == nil || r.HTTPGet == nil || r.HTTPGet.Path != "/healthz/ready" || r.HTTPGet.Port.IntValue() != 15020 {
		t.Errorf("node proxy readiness probe %+v", r)
	}
	caps := p.SecurityContext.Capabilities.Add
	for _, want := range []corev1.Capability{"NET_ADMIN", "SYS_ADMIN"} {
		if !slices.Contains(caps, want) {
			t.Errorf("node proxy capabilities %v lack %s", caps, want)
		}
	}
	var token, root bool
	for _, v := range spec.Volumes {
		if v.Projected != nil {
			for _, s := range v.Projected.Sources {
				if sat := s.ServiceAccountToken; sat != nil && sat.Audience == "istio-ca" && sat.Path == "istio-token" {
					token = true
				}
			}
		}
		if v.ConfigMap != nil && v.ConfigMap.Name == "istio-ca-root-cert" {
			root = true
		}
	}
	if !token || !root {
		t.Errorf("node proxy: istio-ca token volume %v, istio-ca-root-cert volume %v", token, root)
	}
}

// TestCNIChartOnAPIServer has a real API server validate every object each
// case renders, then installs the chart with helm.
func TestCNIChartOnAPIServer(t *testing.T) {
	tl := newTools(t)
	env := kubetest.Start(t)
	kubeconfig := writeKubeconfig(t, env.Config, "")
	tl.run(t, "", tl.kubectl, "--kubeconfig", kubeconfig, "create", "namespace", releaseNamespace)
	for _, c := range loadCNICases(t) {
		t.Run("dry-run/"+c.name, func(t *testing.T) {
			rendered := tl.renderCNI(t, c)
			out := tl.run(t, rendered, tl.kubectl, "--kubeconfig", kubeconfig, "apply", "--dry-run=server", "-f", "-")
			if n := strings.Count(out, "(server dry run)"); n < strings.Count(rendered, "\nkind: ") {
				t.Errorf("the API server checked %d objects, fewer than rendered:\n%s", n, out)
			}
		})
	}
	t.Run("install", func(t *testing.T) {
		tl.run(t, "", tl.helm, "--kubeconfig", kubeconfig, "install", cniRelease, tl.chart("cni"), "--namespace", releaseNamespace)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, name := range []string{"meshpilot-cni", "ztunnel"} {
			if _, err := env.Kube.AppsV1().DaemonSets(releaseNamespace).Get(ctx, name, metav1.GetOptions{}); err != nil {
				t.Errorf("daemonset %s: %v", name, err)
			}
			if _, err := env.Kube.CoreV1().ServiceAccounts(releaseNamespace).Get(ctx, name, metav1.GetOptions{}); err != nil {
				t.Errorf("serviceaccount %s: %v", name, err)
			}
		}
	})
}

// TestCNIRBACIsSufficientAndMinimal installs the chart, then makes the
// plugin's and the node agent's API calls with nothing but each
// ServiceAccount's token: the plugin's own Pod reader (plugin.KubePods, as
// the plugin runs it with the kubeconfig the installer writes), and the node
// agent's get, list and watch by node and merge patch of Pods, and its
// watch of Namespaces. Then the authorizer is asked about what neither may
// do.
func TestCNIRBACIsSufficientAndMinimal(t *testing.T) {
	tl := newTools(t)
	env := kubetest.Start(t)
	admin := writeKubeconfig(t, env.Config, "")
	tl.run(t, "", tl.helm, "--kubeconfig", admin, "install", cniRelease, tl.chart("cni"),
		"--namespace", releaseNamespace, "--create-namespace")
	tl.run(t, cniWorldYAML, tl.kubectl, "--kubeconfig", admin, "apply", "-f", "-")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	clientAs := func(sa string) kubernetes.Interface {
		t.Helper()
		expiry := int64(3600)
		tok, err := env.Kube.CoreV1().ServiceAccounts(releaseNamespace).CreateToken(ctx, sa,
			&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("TokenRequest for %s: %v", sa, err)
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", writeKubeconfig(t, env.Config, tok.Status.Token))
		if err != nil {
			t.Fatal(err)
		}
		return kubernetes.NewForConfigOrDie(cfg)
	}

	t.Run("the plugin reads pods and namespaces", func(t *testing.T) {
		pods := &plugin.KubePods{Client: clientAs("meshpilot-cni")}
		info, err := pods.Get(ctx, "shop", "web-0")
		if err != nil {
			t.Fatalf("the plugin's Pod reader with the installer's token: %v", err)
		}
		if !info.Ambient() {
			t.Errorf("web-0 read as not ambient: %+v", info)
		}
	})

	t.Run("the node agent reads, watches by node and annotates pods, and watches namespaces", func(t *testing.T) {
		kube := clientAs("ztunnel")
		if _, err := kube.CoreV1().Pods("shop").Get(ctx, "web-0", metav1.GetOptions{}); err != nil {
			t.Errorf("get: %v", err)
		}
		byNode := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", "node-1").String()}
		list, err := kube.CoreV1().Pods("").List(ctx, byNode)
		if err != nil {
			t.Errorf("list by node: %v", err)
		} else if len(list.Items) != 1 {
			t.Errorf("list by node: %d pods", len(list.Items))
		}
		if w, err := kube.CoreV1().Pods("").Watch(ctx, byNode); err != nil {
			t.Errorf("watch by node: %v", err)
		} else {
			w.Stop()
		}
		if _, err := kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err != nil {
			t.Errorf("list namespaces: %v", err)
		}
		if w, err := kube.CoreV1().Namespaces().Watch(ctx, metav1.ListOptions{}); err != nil {
			t.Errorf("watch namespaces: %v", err)
		} else {
			w.Stop()
		}
		for _, value := range []string{`"enabled"`, "null"} {
			patch := fmt.Sprintf(`{"metadata":{"annotations":{"ambient.istio.io/redirection":%s}}}`, value)
			if _, err := kube.CoreV1().Pods("shop").Patch(ctx, "web-0", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				t.Errorf("patch %s: %v", value, err)
			}
		}
	})

	t.Run("nothing more", func(t *testing.T) {
		for _, tc := range []struct {
			sa, verb, resource string
			allowed            bool
		}{
			{"meshpilot-cni", "get", "pods", true},
			{"meshpilot-cni", "get", "namespaces", true},
			{"meshpilot-cni", "list", "pods", false},
			{"meshpilot-cni", "patch", "pods", false},
			{"meshpilot-cni", "get", "secrets", false},
			{"meshpilot-cni", "get", "configmaps", false},
			{"ztunnel", "get", "pods", true},
			{"ztunnel", "list", "pods", true},
			{"ztunnel", "patch", "pods", true},
			{"ztunnel", "watch", "pods", true},
			{"ztunnel", "update", "pods", false},
			{"ztunnel", "delete", "pods", false},
			{"ztunnel", "get", "namespaces", true},
			{"ztunnel", "patch", "namespaces", false},
			{"ztunnel", "get", "secrets", false},
		} {
			review, err := env.Kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
				Spec: authorizationv1.SubjectAccessReviewSpec{
					User:               "system:serviceaccount:" + releaseNamespace + ":" + tc.sa,
					ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: tc.verb, Resource: tc.resource, Namespace: "shop"},
				},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if review.Status.Allowed != tc.allowed {
				t.Errorf("%s %s %s: allowed = %v, want %v", tc.sa, tc.verb, tc.resource, review.Status.Allowed, tc.allowed)
			}
		}
	})
}

const cniWorldYAML = `
apiVersion: v1
kind: Namespace
metadata:
  name: shop
  labels: {istio.io/dataplane-mode: ambient}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: web, namespace: shop}
---
apiVersion: v1
kind: Pod
metadata: {name: web-0, namespace: shop}
spec:
  serviceAccountName: web
  nodeName: node-1
  containers: [{name: web, image: example.invalid/web}]
`
