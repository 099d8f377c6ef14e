package deploy

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/quota-platform/quota/rules"
)

// manifests are the objects of deploy/k8s, each decoded strictly into its
// Kubernetes API type: an unknown or misspelt field, a wrong type or a
// duplicate key fails.
type manifests struct {
	deployment     *appsv1.Deployment
	service        *corev1.Service
	configMap      *corev1.ConfigMap
	secret         *corev1.Secret
	pdb            *policyv1.PodDisruptionBudget
	hpa            *autoscalingv2.HorizontalPodAutoscaler
	serviceMonitor *monitoringv1.ServiceMonitor
	files          map[string]string // kind -> file
}

func decodeManifests(t *testing.T) manifests {
	t.Helper()
	files, err := filepath.Glob("k8s/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("k8s/*.yaml: %v", err)
	}
	m := manifests{files: map[string]string{}}
	for _, f := range files {
		for i, doc := range bytes.Split(readFile(t, f), []byte("\n---")) {
			var head struct{ APIVersion, Kind string }
			if err := yaml.Unmarshal(doc, &head); err != nil {
				t.Fatalf("%s document %d: %v", f, i, err)
			}
			if head.Kind == "" {
				continue
			}
			var obj any
			switch head.APIVersion + " " + head.Kind {
			case "apps/v1 Deployment":
				m.deployment = &appsv1.Deployment{}
				obj = m.deployment
			case "v1 Service":
				m.service = &corev1.Service{}
				obj = m.service
			case "v1 ConfigMap":
				m.configMap = &corev1.ConfigMap{}
				obj = m.configMap
			case "v1 Secret":
				m.secret = &corev1.Secret{}
				obj = m.secret
			case "policy/v1 PodDisruptionBudget":
				m.pdb = &policyv1.PodDisruptionBudget{}
				obj = m.pdb
			case "autoscaling/v2 HorizontalPodAutoscaler":
				m.hpa = &autoscalingv2.HorizontalPodAutoscaler{}
				obj = m.hpa
			case "monitoring.coreos.com/v1 ServiceMonitor":
				m.serviceMonitor = &monitoringv1.ServiceMonitor{}
				obj = m.serviceMonitor
			case "kustomize.config.k8s.io/v1beta1 Kustomization":
				var k struct {
					APIVersion string   `json:"apiVersion"`
					Kind       string   `json:"kind"`
					Resources  []string `json:"resources"`
				}
				if err := yaml.UnmarshalStrict(doc, &k); err != nil {
					t.Fatalf("%s: %v", f, err)
				}
				for _, r := range k.Resources {
					if _, err := os.Stat(filepath.Join("k8s", r)); err != nil {
						t.Errorf("%s lists %s: %v", f, r, err)
					}
				}
				continue
			default:
				t.Fatalf("%s: no schema for %s %s", f, head.APIVersion, head.Kind)
			}
			if err := yaml.UnmarshalStrict(doc, obj); err != nil {
				t.Fatalf("%s (%s): %v", f, head.Kind, err)
			}
			m.files[head.Kind] = f
		}
	}
	for kind, ok := range map[string]bool{
		"Deployment": m.deployment != nil, "Service": m.service != nil, "ConfigMap": m.configMap != nil,
		"PodDisruptionBudget": m.pdb != nil, "HorizontalPodAutoscaler": m.hpa != nil, "ServiceMonitor": m.serviceMonitor != nil,
	} {
		if !ok {
			t.Errorf("no %s in deploy/k8s", kind)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return m
}

func TestKubernetesManifests_StrictSchemaAndConsistent(t *testing.T) {
	t.Parallel()
	m := decodeManifests(t)
	d := m.deployment
	pod := d.Spec.Template
	sel, err := metaSelector(d.Spec.Selector.MatchLabels)
	if err != nil {
		t.Fatal(err)
	}
	if !sel.Matches(labels.Set(pod.Labels)) {
		t.Fatalf("Deployment selector %v does not match its pods' labels %v", d.Spec.Selector.MatchLabels, pod.Labels)
	}
	for name, s := range map[string]map[string]string{
		"Service": m.service.Spec.Selector, "PodDisruptionBudget": m.pdb.Spec.Selector.MatchLabels,
	} {
		if !labels.SelectorFromSet(s).Matches(labels.Set(pod.Labels)) {
			t.Errorf("%s selector %v misses the Deployment's pods %v", name, s, pod.Labels)
		}
	}
	if !labels.SelectorFromSet(m.serviceMonitor.Spec.Selector.MatchLabels).Matches(labels.Set(m.service.Labels)) {
		t.Errorf("ServiceMonitor selector %v misses the Service's labels %v", m.serviceMonitor.Spec.Selector.MatchLabels, m.service.Labels)
	}
	if ref := m.hpa.Spec.ScaleTargetRef; ref.Kind != "Deployment" || ref.Name != d.Name {
		t.Errorf("HPA scales %s/%s, want Deployment/%s", ref.Kind, ref.Name, d.Name)
	}

	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if want := fmt.Sprintf("0.0.0.0:%d", ports["http"]); env["QUOTA_LISTEN"] != want {
		t.Errorf("QUOTA_LISTEN %q, want %q (the http port)", env["QUOTA_LISTEN"], want)
	}
	for _, probe := range []struct {
		name, path string
		got        *corev1.Probe
	}{{"readiness", "/readyz", c.ReadinessProbe}, {"liveness", "/healthz", c.LivenessProbe}} {
		if probe.got == nil || probe.got.HTTPGet == nil || probe.got.HTTPGet.Path != probe.path || ports[probe.got.HTTPGet.Port.String()] == 0 {
			t.Errorf("%s probe %+v, want GET %s on a named container port", probe.name, probe.got, probe.path)
		}
	}
	if p := m.service.Spec.Ports; len(p) != 1 || ports[p[0].TargetPort.String()] == 0 {
		t.Errorf("Service ports %+v: want one targeting a named container port", p)
	}
	if !slices.ContainsFunc(m.serviceMonitor.Spec.Endpoints, func(e monitoringv1.Endpoint) bool {
		return e.Port == m.service.Spec.Ports[0].Name && e.Path == "/metrics"
	}) {
		t.Errorf("ServiceMonitor does not scrape /metrics on the Service's port")
	}

	// The drain: preStop, then up to 10 s of requests in flight and two
	// 30 s final flushes must fit in the grace period.
	var preStop int64
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
		preStop = c.Lifecycle.PreStop.Sleep.Seconds
	}
	if preStop == 0 {
		t.Error("no preStop sleep: the Service would still route to a pod that is draining")
	}
	if g := pod.Spec.TerminationGracePeriodSeconds; g == nil || *g < preStop+10+30+30 {
		t.Errorf("terminationGracePeriodSeconds %v, want at least preStop %d + 70", g, preStop)
	}
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		pod.Spec.SecurityContext == nil || pod.Spec.SecurityContext.RunAsNonRoot == nil || !*pod.Spec.SecurityContext.RunAsNonRoot {
		t.Errorf("container security context %+v / pod %+v: want non-root, read-only root, no privilege escalation", sc, pod.Spec.SecurityContext)
	}

	// QUOTA_RULES is in the ConfigMap's volume, and the ConfigMap holds
	// valid rules: deploy/rules.yaml itself.
	var mount string
	for _, v := range pod.Spec.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name == m.configMap.Name {
			for _, vm := range c.VolumeMounts {
				if vm.Name == v.Name {
					mount = vm.MountPath
				}
			}
		}
	}
	key, ok := strings.CutPrefix(env["QUOTA_RULES"], mount+"/")
	if mount == "" || !ok {
		t.Fatalf("QUOTA_RULES %q is not in the mount of ConfigMap %s (%q)", env["QUOTA_RULES"], m.configMap.Name, mount)
	}
	data, ok := m.configMap.Data[key]
	if !ok {
		t.Fatalf("ConfigMap %s has no key %s", m.configMap.Name, key)
	}
	if _, err := rules.ParseYAML([]byte(data)); err != nil {
		t.Errorf("ConfigMap rules: %v", err)
	}
	if data != string(readFile(t, "rules.yaml")) {
		t.Errorf("ConfigMap %s's %s differs from deploy/rules.yaml", m.configMap.Name, key)
	}
	if m.secret != nil {
		ref := c.EnvFrom
		if len(ref) == 0 || ref[0].SecretRef == nil || ref[0].SecretRef.Name != m.secret.Name {
			t.Errorf("the container does not take its secrets from Secret %s", m.secret.Name)
		}
	}
}

// A misspelt field fails the strict decoding the test relies on.
func TestKubernetesManifests_StrictDecodingRejectsUnknownFields(t *testing.T) {
	t.Parallel()
	doc := bytes.Replace(readFile(t, "k8s/deployment.yaml"), []byte("readinessProbe:"), []byte("readinesProbe:"), 1)
	if err := yaml.UnmarshalStrict(doc, &appsv1.Deployment{}); err == nil || !strings.Contains(err.Error(), "readinesProbe") {
		t.Fatalf("misspelt field: %v", err)
	}
}

func metaSelector(m map[string]string) (labels.Selector, error) {
	if len(m) == 0 {
		return nil, fmt.Errorf("empty selector")
	}
	return labels.SelectorFromSet(m), nil
}
