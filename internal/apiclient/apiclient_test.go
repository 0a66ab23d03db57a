package apiclient

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

func TestConnectRefusesBadConfigs(t *testing.T) {
	if _, err := Connect(nil, nil, nil); err == nil || err.Error() != "nil *rest.Config" {
		t.Errorf("nil config: %v", err)
	}
	if _, err := Connect(&rest.Config{Host: "localhost:1", QPS: 5}, nil, nil); err == nil || !strings.Contains(err.Error(), "Burst") {
		t.Errorf("QPS without Burst: %v", err)
	}
	if _, err := Connect(&rest.Config{Host: "localhost:1", QPS: 5, Burst: 10}, nil, nil); err != nil {
		t.Errorf("QPS and Burst: %v", err)
	}
}

// kindOf takes the one versioned kind of a type from the scheme, the
// caller's or client-go's.
func TestKindOf(t *testing.T) {
	c, err := Connect(&rest.Config{Host: "localhost:1"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	own := runtime.NewScheme()
	if err := corev1.AddToScheme(own); err != nil {
		t.Fatal(err)
	}
	mine, err := Connect(&rest.Config{Host: "localhost:1"}, own, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		c    *Clients
		obj  runtime.Object
		want schema.GroupVersionKind
		err  string
	}{
		{"core", c, &corev1.Pod{}, corev1.SchemeGroupVersion.WithKind("Pod"), ""},
		{"group", c, &appsv1.Deployment{}, appsv1.SchemeGroupVersion.WithKind("Deployment"), ""},
		{"unversioned", c, &metav1.Status{}, schema.GroupVersionKind{}, "unversioned"},
		{"own scheme", mine, &corev1.ConfigMap{}, corev1.SchemeGroupVersion.WithKind("ConfigMap"), ""},
		{"not in own scheme", mine, &appsv1.Deployment{}, schema.GroupVersionKind{}, "no kind is registered"},
	} {
		got, err := tc.c.kindOf(tc.obj)
		if got != tc.want || (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %v, %v; want %v, an error with %q", tc.name, got, err, tc.want, tc.err)
		}
	}
}

func TestTimeoutOf(t *testing.T) {
	s := int64(30)
	if d := timeoutOf(metav1.ListOptions{TimeoutSeconds: &s}); d.Seconds() != 30 {
		t.Errorf("timeout %v, want 30s", d)
	}
	if d := timeoutOf(metav1.ListOptions{}); d != 0 {
		t.Errorf("no TimeoutSeconds: timeout %v, want none", d)
	}
}
