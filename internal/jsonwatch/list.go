package jsonwatch

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// ListMeta is what a list response says besides its items.
type ListMeta struct {
	ResourceVersion string
	Continue        string
	// RemainingItemCount is the server's count of the items after this
	// page, where it gives one.
	RemainingItemCount *int64
}

// ItemError is an item of a list that was read to its end but not
// understood: the list goes on.
type ItemError struct {
	Index int
	Err   error
}

func (e *ItemError) Error() string { return fmt.Sprintf("item %d: %v", e.Index, e.Err) }
func (e *ItemError) Unwrap() error { return e.Err }

// List reads a list response ({"kind": "…List", "metadata": {…}, "items":
// […]}) from body, decoding each item as a watch event's object and
// passing it to fn as soon as it is read, or an *ItemError for one that
// is not understood. Items without kind and apiVersion (the server leaves
// them out of lists of built-in types) get the list's, as apimachinery's
// UnstructuredList gives them; they are passed on once the list's kind is
// known. An error returned means the response could not be read.
func (d *Decoder) List(body io.Reader, fn func(runtime.Object, error)) (ListMeta, error) {
	v := &d.vals
	saved := v.dec
	defer func() { v.dec = saved }()
	v.dec = jsontext.NewDecoder(body, jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	dec := v.dec
	if dec.PeekKind() != '{' {
		_, err := dec.ReadToken()
		if err == nil {
			err = errors.New("the list is not a JSON object")
		}
		return ListMeta{}, err
	}
	if _, err := dec.ReadToken(); err != nil {
		return ListMeta{}, err
	}
	var (
		lm               ListMeta
		kind, apiVersion string
		pending          []*unstructured.Unstructured // items waiting for the list's kind
		n                int
	)
	for dec.PeekKind() != '}' {
		name, _, err := v.name()
		if err != nil {
			return lm, err
		}
		switch name {
		case "kind", "apiVersion":
			val, err := v.value(levelOther)
			if err != nil {
				return lm, err
			}
			s, _ := val.(string)
			if name == "kind" {
				kind = s
			} else {
				apiVersion = s
			}
		case "metadata":
			if err := d.listMeta(&lm); err != nil {
				return lm, err
			}
		case "items":
			if dec.PeekKind() == 'n' {
				if _, err := dec.ReadToken(); err != nil {
					return lm, err
				}
				continue
			}
			if dec.PeekKind() != '[' {
				return lm, errors.New("the list's items are not a JSON array")
			}
			if _, err := dec.ReadToken(); err != nil {
				return lm, err
			}
			for dec.PeekKind() != ']' {
				obj, err := d.item()
				switch {
				case err != nil && !errors.Is(err, errSemantic):
					return lm, err
				case err != nil:
					fn(nil, &ItemError{Index: n, Err: err})
				default:
					if u, ok := obj.(*unstructured.Unstructured); ok && u.GetKind() == "" && u.GetAPIVersion() == "" {
						pending = append(pending, u)
						break
					}
					fn(obj, nil)
				}
				n++
			}
			if _, err := dec.ReadToken(); err != nil {
				return lm, err
			}
		default:
			if err := dec.SkipValue(); err != nil {
				return lm, err
			}
		}
	}
	if _, err := dec.ReadToken(); err != nil {
		return lm, err
	}
	for _, u := range pending {
		u.SetKind(strings.TrimSuffix(kind, "List"))
		u.SetAPIVersion(apiVersion)
		fn(u, nil)
	}
	return lm, nil
}

// item decodes one item of a list: as an event's object, except that a
// missing kind is allowed (the list's is given after).
func (d *Decoder) item() (runtime.Object, error) {
	if d.typed != nil {
		return d.typed.decode(d.f, true, true)
	}
	if d.vals.dec.PeekKind() != '{' {
		if _, err := d.vals.value(levelOther); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: the item is not a JSON object", errSemantic)
	}
	m, _, err := d.vals.object(levelTop, d.vals.project)
	if err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// Object decodes one object from b, as a list's item: objects stored by
// the durable cache. It uses the Decoder's goroutine, and no Reader may be
// in use at the time.
func (d *Decoder) Object(b []byte) (runtime.Object, error) {
	v := &d.vals
	saved := v.dec
	defer func() { v.dec = saved }()
	v.dec = jsontext.NewDecoder(bytes.NewReader(b), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	obj, err := d.item()
	if err != nil {
		return nil, err
	}
	if _, err := v.dec.ReadToken(); err != io.EOF { // nothing after the object
		return nil, fmt.Errorf("after the object: %v", err)
	}
	return obj, nil
}

// listMeta reads a list's metadata: its resourceVersion, continue token
// and count of the items after the page.
func (d *Decoder) listMeta(lm *ListMeta) error {
	val, err := d.vals.value(levelOther)
	if err != nil {
		return err
	}
	m, _ := val.(map[string]any)
	lm.ResourceVersion, _ = m["resourceVersion"].(string)
	lm.Continue, _ = m["continue"].(string)
	if n, ok := m["remainingItemCount"].(int64); ok {
		lm.RemainingItemCount = &n
	}
	return nil
}
