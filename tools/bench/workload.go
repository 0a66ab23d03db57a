package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

const (
	podNamespace = "bench-pods"
	annTS        = "bench/ts"
	annRound     = "bench/round"
	fieldManager = "kinformer-bench"
)

// restConfig loads the kubeconfig and sets protobuf on the wire (the same for
// every contender) and a client-side rate limit high enough never to matter.
func restConfig(kubeconfig string, qps float32) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	cfg.QPS, cfg.Burst = qps, int(qps)
	cfg.UserAgent = "kinformer-bench"
	return cfg, nil
}

// randHex returns n hex characters, distinct per (seed, salt).
func randHex(r *rand.Rand, n int) string {
	b := make([]byte, (n+1)/2)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return hex.EncodeToString(b)[:n]
}

// cmNamespace holds the ConfigMaps: bench-cm, or bench-cm-distinct for the
// -distinct workload, so that a reused data dir never mixes the two.
var cmNamespace = "bench-cm"

// distinctCMs selects the low-sharing ConfigMaps (-distinct): see configMap.
var distinctCMs bool

func setDistinct(on bool) {
	distinctCMs = on
	if on {
		cmNamespace = "bench-cm-distinct"
	}
}

func cmName(i int) string { return fmt.Sprintf("cm-%05d", i) }

// configMap returns ConfigMap i: about 1 KiB, labels, distinct content.
// With -distinct (distinctConfigMap) its labels are its own too.
func configMap(i int) *corev1.ConfigMap {
	r := rand.New(rand.NewPCG(uint64(i), 0x6b696e666f726d))
	if distinctCMs {
		return distinctConfigMap(i, r)
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name:      cmName(i),
			Namespace: cmNamespace,
			Labels: map[string]string{
				"app.kubernetes.io/name":      "bench",
				"app.kubernetes.io/instance":  fmt.Sprintf("inst-%03d", i%200),
				"app.kubernetes.io/component": []string{"api", "worker", "cache", "db"}[i%4],
				"bench/shard":                 strconv.Itoa(i % 32),
			},
			Annotations: map[string]string{"bench/created-by": "tools/bench"},
		},
		Data: map[string]string{
			"config.yaml":  "id: " + strconv.Itoa(i) + "\ntoken: " + randHex(r, 200) + "\n",
			"settings.ini": "[main]\nkey=" + randHex(r, 200) + "\n",
			"payload":      randHex(r, 240),
			"checksum":     randHex(r, 64),
		},
	}
}

// distinctConfigMap is the workload of issue 13 ("Also"): ConfigMaps that
// share little. The same data as configMap (four keys, distinct values,
// about 1 KiB), but of their three labels only one is the same everywhere:
// no two objects have equal labels maps, and most label values are unique.
func distinctConfigMap(i int, r *rand.Rand) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name:      cmName(i),
			Namespace: cmNamespace,
			Labels: map[string]string{
				"app.kubernetes.io/name":     "bench",
				"app.kubernetes.io/instance": "inst-" + strconv.Itoa(i),
				"bench/revision":             randHex(r, 12),
			},
			Annotations: map[string]string{"bench/created-by": "tools/bench"},
		},
		Data: map[string]string{
			"config.yaml":  "id: " + strconv.Itoa(i) + "\ntoken: " + randHex(r, 200) + "\n",
			"settings.ini": "[main]\nkey=" + randHex(r, 200) + "\n",
			"payload":      randHex(r, 240),
			"checksum":     randHex(r, 64),
		},
	}
}

func podName(i int) string { return fmt.Sprintf("pod-%05d", i) }

// pod returns Pod i: a realistic Deployment-made pod spec (two containers,
// env, ports, resources, probes, volumes, tolerations, affinity); pending,
// since localapi runs no scheduler.
func pod(i int) *corev1.Pod {
	r := rand.New(rand.NewPCG(uint64(i), 0x706f6473))
	app := fmt.Sprintf("svc-%03d", i%250)
	hash := randHex(r, 10)
	env := []corev1.EnvVar{
		{Name: "APP_NAME", Value: app},
		{Name: "APP_INSTANCE", Value: strconv.Itoa(i)},
		{Name: "LOG_LEVEL", Value: "info"},
		{Name: "DB_URL", Value: "postgres://db-" + strconv.Itoa(i%20) + ".data.svc:5432/app"},
		{Name: "CACHE_TTL", Value: "300s"},
		{Name: "FEATURE_FLAGS", Value: randHex(r, 32)},
		{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
		{Name: "API_KEY", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: app + "-secrets"}, Key: "api-key"}}},
	}
	probe := func(path string, delay int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:        corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString("http")}},
			InitialDelaySeconds: delay, PeriodSeconds: 10, TimeoutSeconds: 2, FailureThreshold: 3,
		}
	}
	ctrl := true
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      podName(i),
			Namespace: podNamespace,
			Labels: map[string]string{
				"app.kubernetes.io/name":    app,
				"app.kubernetes.io/part-of": "shop",
				"pod-template-hash":         hash,
				"tier":                      []string{"frontend", "backend", "batch"}[i%3],
			},
			Annotations: map[string]string{
				"prometheus.io/scrape":              "true",
				"prometheus.io/port":                "9090",
				"kubectl.kubernetes.io/restartedAt": time.Date(2026, 1, 1, 0, 0, i%3600, 0, time.UTC).Format(time.RFC3339),
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: "ReplicaSet", Name: app + "-" + hash,
				UID: types.UID(fmt.Sprintf("%08x-0000-4000-8000-%012x", i%250, i)), Controller: &ctrl, BlockOwnerDeletion: &ctrl,
			}},
		},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{
				{
					Name:    "app",
					Image:   "registry.example/shop/" + app + ":v1." + strconv.Itoa(i%7) + ".0",
					Command: []string{"/app/server"},
					Args:    []string{"--config=/etc/app/config.yaml", "--port=8080", "--metrics-port=9090"},
					Ports: []corev1.ContainerPort{
						{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP},
						{Name: "metrics", ContainerPort: 9090, Protocol: corev1.ProtocolTCP},
					},
					Env: env,
					Resources: corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
						Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("512Mi")},
					},
					VolumeMounts: []corev1.VolumeMount{
						{Name: "config", MountPath: "/etc/app", ReadOnly: true},
						{Name: "tmp", MountPath: "/tmp"},
					},
					LivenessProbe:  probe("/healthz", 10),
					ReadinessProbe: probe("/readyz", 5),
					SecurityContext: &corev1.SecurityContext{
						AllowPrivilegeEscalation: new(bool),
						ReadOnlyRootFilesystem:   &ctrl,
						RunAsNonRoot:             &ctrl,
						Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					},
				},
				{
					Name:  "proxy",
					Image: "registry.example/mesh/proxy:1.22." + strconv.Itoa(i%3),
					Args:  []string{"proxy", "sidecar", "--log-level=warning"},
					Ports: []corev1.ContainerPort{{Name: "proxy-admin", ContainerPort: 15000}},
					Resources: corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("40Mi")},
					},
				},
			},
			Volumes: []corev1.Volume{
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: app + "-config"}}}},
				{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
			NodeSelector: map[string]string{"kubernetes.io/os": "linux"},
			Tolerations: []corev1.Toleration{
				{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
				{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
			},
			Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
				PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
					Weight: 100,
					PodAffinityTerm: corev1.PodAffinityTerm{
						TopologyKey:   "kubernetes.io/hostname",
						LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": app}},
					},
				}},
			}},
		},
	}
}

// parallel runs fn(i) for i in [0, n) on workers goroutines and returns the
// first error.
func parallel(n, workers int, fn func(i int) error) error {
	var next atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					once.Do(func() { firstErr = err })
					next.Store(int64(n))
					return
				}
			}
		})
	}
	wg.Wait()
	return firstErr
}

func ensureNamespace(ctx context.Context, cs kubernetes.Interface, name string) error {
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// createWorkload creates the ConfigMaps and Pods that are not there yet.
func createWorkload(ctx context.Context, cs kubernetes.Interface, nCM, nPods int) error {
	for _, ns := range []string{cmNamespace, podNamespace} {
		if err := ensureNamespace(ctx, cs, ns); err != nil {
			return err
		}
	}
	co := metav1.CreateOptions{FieldManager: fieldManager}
	if err := createObjects("configmaps", nCM, func(i int) error {
		_, err := cs.CoreV1().ConfigMaps(cmNamespace).Create(ctx, configMap(i), co)
		return err
	}); err != nil {
		return err
	}
	return createObjects("pods", nPods, func(i int) error {
		_, err := cs.CoreV1().Pods(podNamespace).Create(ctx, pod(i), co)
		return err
	})
}

// createObjects runs fn(i) for i in [0, n) with 48 concurrent writers,
// counting AlreadyExists as done and retrying other errors (retried), and
// logs the progress as what.
func createObjects(what string, n int, fn func(i int) error) error {
	return createObjectsWith(what, n, 48, fn)
}

// createObjectsWith is createObjects with writers concurrent writers.
func createObjectsWith(what string, n, writers int, fn func(i int) error) error {
	start := time.Now()
	var done atomic.Int64
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				logf("  %s: %d/%d created", what, done.Load(), n)
			}
		}
	}()
	err := parallel(n, writers, func(i int) error {
		err := retried(func() error { return fn(i) })
		done.Add(1)
		return err
	})
	close(stop)
	logf("%s: %d in %.1fs (%.0f/s)", what, n, time.Since(start).Seconds(), float64(n)/time.Since(start).Seconds())
	return err
}

// write is one update made by the burst: the object, the resourceVersion
// the server gave it, and when its response arrived (UnixNano).
type write struct {
	Name, RV string
	Resp     int64
}

// updateBurst patches n ConfigMaps (cm-00000, cm-00001, ... wrapping) as
// fast as workers concurrent writers can: new content for one data key, and
// the annotations bench/round (so a contender counts only this burst) and
// bench/ts (the request's start, UnixNano).
func updateBurst(ctx context.Context, cs kubernetes.Interface, round string, n, nObjects, workers int) ([]write, time.Duration, error) {
	writes := make([]write, n)
	start := time.Now()
	err := parallel(n, workers, func(i int) error {
		r := rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano())))
		name := cmName(i % nObjects)
		ts := time.Now().UnixNano()
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q,%q:%q}},"data":{"payload":%q}}`,
			annTS, strconv.FormatInt(ts, 10), annRound, round, randHex(r, 240))
		cm, err := cs.CoreV1().ConfigMaps(cmNamespace).Patch(ctx, name, types.MergePatchType, []byte(patch),
			metav1.PatchOptions{FieldManager: fieldManager})
		if err != nil {
			return fmt.Errorf("patch %s: %w", name, err)
		}
		writes[i] = write{Name: name, RV: cm.ResourceVersion, Resp: time.Now().UnixNano()}
		return nil
	})
	return writes, time.Since(start), err
}

// retried runs fn until it succeeds or has failed 5 times, waiting 1, 2,
// 4, 8 s between tries: on a loaded machine, etcd times out now and then.
// AlreadyExists is success.
func retried(fn func() error) error {
	var err error
	for i := range 5 {
		if err = fn(); err == nil || apierrors.IsAlreadyExists(err) {
			return nil
		}
		if i < 4 {
			logf("retrying after %v", err)
			time.Sleep(time.Second << i)
		}
	}
	return err
}
