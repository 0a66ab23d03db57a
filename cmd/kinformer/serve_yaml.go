package main

import (
	"bytes"
	"encoding/json"
	"errors"

	"go.yaml.in/yaml/v2"
)

// serve's YAML answers (?format=yaml): bounded by the object before the
// conversion starts (nodes) and by the bytes it writes (marshalYAML).

// errYAMLTooLarge is marshalYAML's error for YAML beyond its limit.
var errYAMLTooLarge = errors.New("YAML too large")

// marshalYAML is sigs.k8s.io/yaml's Marshal (JSON, then YAML by go-yaml
// v2: the same text), written into a buffer that takes limit bytes at
// most: beyond, go-yaml stops at once, and errYAMLTooLarge is returned.
// YAML indents each level of nesting, so its length grows with the
// square of the depth: a custom resource of 54 KB nested 9,000 deep made
// 81 MB of YAML, in 8 s and 300 MB for each request.
func marshalYAML(v any, limit int) ([]byte, error) {
	j, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var doc any
	if err := yaml.Unmarshal(j, &doc); err != nil { // go-yaml picks each number's type, as sigs.k8s.io/yaml does
		return nil, err
	}
	out := &limitedBuffer{limit: limit}
	enc := yaml.NewEncoder(out)
	err = enc.Encode(doc)
	if err == nil {
		err = enc.Close()
	}
	if out.over {
		return nil, errYAMLTooLarge
	}
	return out.Bytes(), err
}

// limitedBuffer is a bytes.Buffer that refuses to grow beyond limit bytes.
type limitedBuffer struct {
	bytes.Buffer
	limit int
	over  bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if b.Len()+len(p) > b.limit {
		b.over = true
		return 0, errYAMLTooLarge
	}
	return b.Buffer.Write(p)
}

// nodes counts the fields and list items of v, a decoded JSON value, up
// to a little more than limit: the work of converting it to YAML, which
// costs kilobytes of memory for each (a 1.1 MB object of 60,000 keys
// took 450 MB), is bounded before it starts.
func nodes(v any, limit int) int {
	n := 0
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for _, e := range v {
				if n > limit {
					return
				}
				n++
				walk(e)
			}
		case []any:
			for _, e := range v {
				if n > limit {
					return
				}
				n++
				walk(e)
			}
		}
	}
	walk(v)
	return n
}

// depth is how deeply v, a decoded JSON value, nests maps and lists.
func depth(v any) int {
	d := 0
	switch v := v.(type) {
	case map[string]any:
		for _, e := range v {
			d = max(d, depth(e))
		}
	case []any:
		for _, e := range v {
			d = max(d, depth(e))
		}
	default:
		return 0
	}
	return d + 1
}
