package squash

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// A generator of realistic Pods, as an API server returns them (without
// managedFields, which the cache cuts): the Pods of many Deployments in a
// few namespaces, in the order of a list (namespace, then name), so that
// the first objects an informer receives are the first workload's. Pods of
// one workload differ in their names, UIDs, IPs, node, timestamps,
// container IDs and resourceVersions; workloads differ in images, labels,
// env, resources and probes.

// workload is a Deployment's template, shared by its Pods.
type workload struct {
	ns, name, hash string
	rsUID          types.UID
	labels         map[string]string
	annotations    map[string]string
	containers     []corev1.Container
	volumes        []corev1.Volume
	sa             string
	replicas       int
}

var (
	teams  = []string{"payments", "search", "platform", "checkout", "identity", "media", "ml-serving", "observability"}
	words  = []string{"api", "worker", "gateway", "indexer", "scheduler", "frontend", "cache", "consumer", "exporter", "router", "auth", "billing", "ingest", "notifier", "reporter"}
	images = []string{"nginx", "envoyproxy/envoy", "library/redis", "golang-app", "python-service", "java-service", "node-web", "otel/opentelemetry-collector"}
)

const alnum = "bcdfghjklmnpqrstvwxz2456789" // the alphabet of generated names

func randString(r *rand.Rand, n int, alphabet string) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[r.IntN(len(alphabet))]
	}
	return string(b)
}

func randUID(r *rand.Rand) types.UID {
	const hex = "0123456789abcdef"
	s := randString(r, 32, hex)
	return types.UID(s[:8] + "-" + s[8:12] + "-4" + s[13:16] + "-a" + s[17:20] + "-" + s[20:])
}

func newWorkload(r *rand.Rand, ns string, i int) *workload {
	name := words[r.IntN(len(words))] + "-" + words[r.IntN(len(words))]
	name = fmt.Sprintf("%s-%d", name, i)
	w := &workload{
		ns:    ns,
		name:  name,
		hash:  randString(r, 10, alnum),
		rsUID: randUID(r),
		labels: map[string]string{
			"app":                          name,
			"app.kubernetes.io/name":       name,
			"app.kubernetes.io/part-of":    ns,
			"app.kubernetes.io/managed-by": "helm",
			"team":                         ns,
		},
		annotations: map[string]string{
			"kubectl.kubernetes.io/restartedAt": time.Date(2026, 11, r.IntN(28)+1, r.IntN(24), r.IntN(60), 0, 0, time.UTC).Format(time.RFC3339),
		},
		sa:       name,
		replicas: 5 + r.IntN(40),
	}
	w.labels["pod-template-hash"] = w.hash
	if r.IntN(2) == 0 {
		w.annotations["prometheus.io/scrape"] = "true"
		w.annotations["prometheus.io/port"] = "9090"
	}
	tok := int64(3607)
	mode := int32(420)
	w.volumes = []corev1.Volume{
		{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: name + "-config"}, DefaultMode: &mode}}},
		{Name: "kube-api-access-" + randString(r, 5, alnum), VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			DefaultMode: &mode,
			Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{ExpirationSeconds: &tok, Path: "token"}},
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
					Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
				{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{
					{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
			}}}},
	}
	n := 1 // most Pods have one container, some a sidecar
	if r.IntN(3) == 0 {
		n = 2
	}
	for c := range n {
		cname := name
		img := images[r.IntN(len(images))]
		if c > 0 {
			cname = []string{"sidecar", "envoy", "log-shipper"}[c-1]
		}
		port := int32(8080 + r.IntN(10))
		probe := func(path string, delay int32) *corev1.Probe {
			return &corev1.Probe{
				ProbeHandler:        corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt32(port), Scheme: corev1.URISchemeHTTP}},
				InitialDelaySeconds: delay, TimeoutSeconds: 1, PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3,
			}
		}
		env := []corev1.EnvVar{
			{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}},
			{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}},
			{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "status.podIP"}}},
			{Name: "LOG_LEVEL", Value: []string{"info", "debug", "warn"}[r.IntN(3)]},
			{Name: "OTEL_EXPORTER_OTLP_ENDPOINT", Value: "http://otel-collector.observability.svc:4317"},
		}
		for range r.IntN(3) {
			env = append(env, corev1.EnvVar{Name: strings.ToUpper(words[r.IntN(len(words))]) + "_URL",
				Value: fmt.Sprintf("http://%s.%s.svc.cluster.local:%d", words[r.IntN(len(words))], teams[r.IntN(len(teams))], 8080+r.IntN(10))})
		}
		w.containers = append(w.containers, corev1.Container{
			Name:  cname,
			Image: fmt.Sprintf("registry.example.com/%s/%s:v%d.%d.%d", ns, img, r.IntN(3), r.IntN(20), r.IntN(10)),
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: port, Protocol: corev1.ProtocolTCP},
				{Name: "metrics", ContainerPort: 9090, Protocol: corev1.ProtocolTCP}},
			Env: env,
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{
					corev1.ResourceCPU:    resource.MustParse(fmt.Sprintf("%dm", 50*(1+r.IntN(10)))),
					corev1.ResourceMemory: resource.MustParse(fmt.Sprintf("%dMi", 64*(1+r.IntN(16)))),
				},
				Limits: corev1.ResourceList{
					corev1.ResourceMemory: resource.MustParse(fmt.Sprintf("%dMi", 128*(1+r.IntN(16)))),
				},
			},
			VolumeMounts: []corev1.VolumeMount{
				{Name: "config", ReadOnly: true, MountPath: "/etc/" + name},
				{Name: w.volumes[1].Name, ReadOnly: true, MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"},
			},
			LivenessProbe:            probe("/healthz", 10),
			ReadinessProbe:           probe("/readyz", 5),
			TerminationMessagePath:   "/dev/termination-log",
			TerminationMessagePolicy: corev1.TerminationMessageReadFile,
			ImagePullPolicy:          corev1.PullIfNotPresent,
		})
	}
	return w
}

// pod returns one of w's Pods.
func (w *workload) pod(r *rand.Rand, rv *int) *corev1.Pod {
	*rv += 1 + r.IntN(1000)
	created := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(r.IntN(30*24*3600)) * time.Second)
	t := func(d int) metav1.Time { return metav1.NewTime(created.Add(time.Duration(d) * time.Second)) }
	node := fmt.Sprintf("ip-10-%d-%d-%d.eu-west-1.compute.internal", r.IntN(4), r.IntN(256), r.IntN(256))
	hostIP := fmt.Sprintf("10.%d.%d.%d", r.IntN(4), r.IntN(256), r.IntN(256))
	podIP := fmt.Sprintf("10.%d.%d.%d", 100+r.IntN(4), r.IntN(256), r.IntN(256))
	truth, grace, prio := true, int64(30), int32(0)
	notReady, unreachable := int64(300), int64(300)
	policy := corev1.PreemptLowerPriority
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:              w.name + "-" + w.hash + "-" + randString(r, 5, alnum),
			GenerateName:      w.name + "-" + w.hash + "-",
			Namespace:         w.ns,
			UID:               randUID(r),
			ResourceVersion:   fmt.Sprint(*rv),
			CreationTimestamp: t(0),
			Labels:            w.labels,
			Annotations:       w.annotations,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet",
				Name: w.name + "-" + w.hash, UID: w.rsUID, Controller: &truth, BlockOwnerDeletion: &truth}},
		},
		Spec: corev1.PodSpec{
			Volumes:                       w.volumes,
			Containers:                    w.containers,
			RestartPolicy:                 corev1.RestartPolicyAlways,
			TerminationGracePeriodSeconds: &grace,
			DNSPolicy:                     corev1.DNSClusterFirst,
			ServiceAccountName:            w.sa,
			DeprecatedServiceAccount:      w.sa,
			NodeName:                      node,
			SecurityContext:               &corev1.PodSecurityContext{},
			SchedulerName:                 corev1.DefaultSchedulerName,
			Tolerations: []corev1.Toleration{
				{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &notReady},
				{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &unreachable},
			},
			Priority:           &prio,
			EnableServiceLinks: &truth,
			PreemptionPolicy:   &policy,
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{
				{Type: "PodReadyToStartContainers", Status: corev1.ConditionTrue, LastTransitionTime: t(3)},
				{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: t(1)},
				{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: t(12 + r.IntN(20))},
				{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: t(12 + r.IntN(20))},
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: t(0)},
			},
			HostIP:    hostIP,
			HostIPs:   []corev1.HostIP{{IP: hostIP}},
			PodIP:     podIP,
			PodIPs:    []corev1.PodIP{{IP: podIP}},
			StartTime: &[]metav1.Time{t(1)}[0],
			QOSClass:  corev1.PodQOSBurstable,
		},
	}
	const hex = "0123456789abcdef"
	for _, c := range w.containers {
		img, _, _ := strings.Cut(c.Image, ":")
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
			Name:         c.Name,
			State:        corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t(2 + r.IntN(5))}},
			Ready:        true,
			RestartCount: int32(r.IntN(3)),
			Image:        c.Image,
			ImageID:      img + "@sha256:" + randString(r, 64, hex),
			ContainerID:  "containerd://" + randString(r, 64, hex),
			Started:      &truth,
		})
	}
	return p
}

// corpus is n Pods of a cluster, in list order, with their protobuf and
// JSON encodings.
type corpus struct {
	pods  []*corev1.Pod
	proto [][]byte
	json  [][]byte
}

// makeCorpus returns n Pods made from seed.
func makeCorpus(tb testing.TB, seed uint64, n int) *corpus {
	tb.Helper()
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	var ws []*workload
	total := 0
	for i := 0; total < n; i++ {
		w := newWorkload(r, teams[r.IntN(len(teams))], i)
		ws = append(ws, w)
		total += w.replicas
	}
	rv := 1_000_000
	var pods []*corev1.Pod
	for _, w := range ws {
		for range w.replicas {
			pods = append(pods, w.pod(r, &rv))
		}
	}
	slices.SortFunc(pods, func(a, b *corev1.Pod) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	pods = pods[:n]
	c := &corpus{pods: pods}
	for _, p := range pods {
		b, err := p.Marshal()
		if err != nil {
			tb.Fatal(err)
		}
		c.proto = append(c.proto, b)
		p := p.DeepCopy()
		p.APIVersion, p.Kind = "v1", "Pod" // as a custom resource's JSON has them
		j, err := json.Marshal(p)
		if err != nil {
			tb.Fatal(err)
		}
		c.json = append(c.json, j)
	}
	return c
}

func avgLen(bs [][]byte) float64 {
	n := 0
	for _, b := range bs {
		n += len(b)
	}
	return float64(n) / float64(len(bs))
}

func TestCorpusIsRealistic(t *testing.T) {
	c := makeCorpus(t, 1, 500)
	p, j := avgLen(c.proto), avgLen(c.json)
	t.Logf("500 Pods: %.0f B of protobuf, %.0f B of JSON on average", p, j)
	if p < 1200 || p > 4000 {
		t.Errorf("a Pod's protobuf is %.0f B on average, want about 2 KB", p)
	}
	seen := map[string]bool{}
	for _, b := range c.proto {
		if seen[string(b)] {
			t.Fatal("two Pods have the same encoding")
		}
		seen[string(b)] = true
	}
}
