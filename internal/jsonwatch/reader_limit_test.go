package jsonwatch

import (
	"errors"
	"io"
	"strings"
	"testing"
)

// An event longer than MaxEvent ends the stream with ErrEventTooLarge
// after reading about that much, not the whole of it; events before it
// count, and a long stream of small events is no event too large.
func TestEventTooLarge(t *testing.T) {
	small := strings.Repeat(widgetEvent+"\n", MaxEvent/len(widgetEvent)+10) // more than MaxEvent in all
	huge := `{"type":"ADDED","object":{"kind":"W","s":"` + strings.Repeat("x", MaxEvent) + `"}}`
	body := &countingReader{r: strings.NewReader(small + huge)}
	r := NewDecoder(unstructuredFormat).NewReader(io.NopCloser(body))
	n := 0
	var err error
	for err == nil {
		if _, err = r.Next(); err == nil {
			n++
		}
	}
	if want := strings.Count(small, "\n"); n != want {
		t.Fatalf("%d events before the large one, want %d", n, want)
	}
	if !errors.Is(err, ErrEventTooLarge) {
		t.Fatalf("got %v, want ErrEventTooLarge", err)
	}
	if extra := body.n - int64(len(small)); extra > MaxEvent+1<<20 {
		t.Fatalf("read %d bytes of the large event", extra)
	}
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
