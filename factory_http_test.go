package kinformer

import (
	"errors"
	"net/http"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
)

// errOwnClient is what the transport of TestFactoryHTTPClient answers.
var errOwnClient = errors.New("the factory's own HTTP client was used")

type refusingTransport struct{ calls int }

func (r *refusingTransport) RoundTrip(*http.Request) (*http.Response, error) {
	r.calls++
	return nil, errOwnClient
}

// FactoryOptions.HTTPClient carries the factory's requests: discovery,
// here, whose error is the client's.
func TestFactoryHTTPClient(t *testing.T) {
	rt := &refusingTransport{}
	f := NewFactory(&rest.Config{Host: "https://127.0.0.1:1"}, &FactoryOptions{HTTPClient: &http.Client{Transport: rt}})
	defer f.Stop()
	_, err := Shared[*corev1.Pod](f, "", nil)
	if !errors.Is(err, errOwnClient) || rt.calls == 0 {
		t.Fatalf("Shared: %v after %d requests through FactoryOptions.HTTPClient; want its transport's error", err, rt.calls)
	}
}
