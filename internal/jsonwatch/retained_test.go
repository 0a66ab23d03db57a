package jsonwatch

import (
	"bytes"
	"io"
	"runtime"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func heapNow() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkRetained reports the heap that 10,000 decoded objects hold
// (retained-B/obj), with kinformer's decoder and with client-go's dynamic
// decoding, managedFields dropped (what client-go with a stripping
// Transform keeps).
func BenchmarkRetained(b *testing.B) {
	const n = 10000
	stream := benchStream(n)
	measure := func(b *testing.B, decode func(keep []any) []any) {
		var total uint64
		for b.Loop() {
			base := heapNow()
			keep := decode(make([]any, 0, n))
			total += heapNow() - base
			runtime.KeepAlive(keep)
		}
		b.ReportMetric(float64(total)/float64(b.N)/n, "retained-B/obj")
	}
	b.Run("kinformer", func(b *testing.B) {
		measure(b, func(keep []any) []any {
			r := NewDecoder(&Format{StripManagedFields: true, ShareContainers: true}).NewReader(io.NopCloser(bytes.NewReader(stream)))
			for {
				ev, err := r.Next()
				if err != nil {
					return keep
				}
				keep = append(keep, ev.Object)
			}
		})
	})
	// With the decoder kept, as an informer keeps it: its interning
	// tables count too.
	b.Run("kinformer+tables", func(b *testing.B) {
		var total uint64
		for b.Loop() {
			base := heapNow()
			d := NewDecoder(&Format{StripManagedFields: true, ShareContainers: true})
			r := d.NewReader(io.NopCloser(bytes.NewReader(stream)))
			keep := make([]any, 0, n)
			for {
				ev, err := r.Next()
				if err != nil {
					break
				}
				keep = append(keep, ev.Object)
			}
			total += heapNow() - base
			runtime.KeepAlive(keep)
			runtime.KeepAlive(d)
		}
		b.ReportMetric(float64(total)/float64(b.N)/n, "retained-B/obj")
	})
	b.Run("client-go", func(b *testing.B) {
		measure(b, func(keep []any) []any {
			dec := restclientwatchDecoder(stream)
			for {
				_, obj, err := dec.Decode()
				if err != nil {
					return keep
				}
				obj.(*unstructured.Unstructured).SetManagedFields(nil)
				keep = append(keep, obj)
			}
		})
	})
}
