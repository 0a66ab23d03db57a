package jsonwatch

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"reflect"
	"runtime"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kinformer/kinformer/internal/intern"
)

// randomValue makes JSON values from small pools, so that containers
// repeat, nearly repeat, and nest: what sharing must get right.
func randomValue(r *rand.Rand, depth int) any {
	switch k := r.IntN(10); {
	case depth > 3 || k < 3:
		switch r.IntN(6) {
		case 0:
			return fmt.Sprintf("s%d", r.IntN(8))
		case 1:
			return r.IntN(5)
		case 2:
			return float64(r.IntN(3)) + 0.5
		case 3:
			return r.IntN(2) == 0
		case 4:
			return nil
		default:
			return fmt.Sprintf("long-%d-%0100d", r.IntN(3), 0) // too long to intern
		}
	case k < 6:
		m := map[string]any{}
		for range r.IntN(maxShared + 3) {
			m[fmt.Sprintf("k%d", r.IntN(6))] = randomValue(r, depth+1)
		}
		return m
	default:
		a := make([]any, r.IntN(maxShared+3))
		for i := range a {
			a[i] = randomValue(r, depth+1)
		}
		return a
	}
}

// countContainers counts the maps and slices in v, v included.
func countContainers(v any) int {
	n := 0
	switch x := v.(type) {
	case map[string]any:
		n++
		for _, e := range x {
			n += countContainers(e)
		}
	case []any:
		n++
		for _, e := range x {
			n += countContainers(e)
		}
	}
	return n
}

// TestSharedContainersStream decodes a long stream of random objects with
// one Decoder, far more containers than its tables hold, with collections
// between, and requires every object to equal apimachinery's decoding of
// its event; and equal containers to be shared.
func TestSharedContainersStream(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	// Enough objects for several times the containers the tables hold
	// (two generations), checked below; 20,000 took 272 s under -race on
	// a loaded machine.
	const n = 6000
	var events [][]byte
	var stream bytes.Buffer
	for i := range n {
		obj := map[string]any{"kind": "W", "metadata": map[string]any{"name": fmt.Sprintf("o%d", i)}, "spec": randomValue(r, 0), "status": randomValue(r, 1)}
		raw, err := json.Marshal(map[string]any{"type": "ADDED", "object": obj})
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, raw)
		stream.Write(raw)
		stream.WriteByte('\n')
	}
	rd := NewDecoder(unstructuredFormat).NewReader(io.NopCloser(&stream))
	seen := map[string]any{} // spec's JSON -> the first decoded spec
	sharedSpecs, containers := 0, 0
	for i, raw := range events {
		got, err := rd.Next()
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		want, err := reference(raw, unstructuredFormat)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("event %d:\ndirect:    %s\nreference: %s", i, describe(got), describe(want))
		}
		containers += countContainers(got.Object.(*unstructured.Unstructured).Object)
		spec := got.Object.(*unstructured.Unstructured).Object["spec"]
		if m, ok := spec.(map[string]any); ok && len(m) > 0 && len(m) <= 2 {
			k, _ := json.Marshal(m)
			if first, ok := seen[string(k)]; ok && reflect.ValueOf(first).UnsafePointer() == reflect.ValueOf(m).UnsafePointer() {
				sharedSpecs++
			} else if !ok {
				seen[string(k)] = m
			}
		}
		if i%1000 == 0 {
			runtime.GC() // free what the tables let go of, so that addresses are reused
		}
	}
	if sharedSpecs == 0 {
		t.Fatal("no small equal container was shared")
	}
	t.Logf("%d events, %d containers", n, containers)
	if min := 4 * 2 * intern.Generation; containers < min {
		t.Fatalf("the stream decoded %d containers, fewer than %d: too few to overflow the tables", containers, min)
	}
	t.Logf("%d small specs shared with an earlier equal one", sharedSpecs)
}
