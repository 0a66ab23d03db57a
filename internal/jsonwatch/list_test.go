package jsonwatch

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// referenceList decodes a list response as apimachinery's UnstructuredList
// does, managedFields removed after.
func referenceList(body []byte) ([]runtime.Object, ListMeta, error) {
	ul := &unstructured.UnstructuredList{}
	if _, _, err := unstructured.UnstructuredJSONScheme.Decode(body, nil, ul); err != nil {
		return nil, ListMeta{}, err
	}
	var items []runtime.Object
	for i := range ul.Items {
		u := &ul.Items[i]
		if md, ok := u.Object["metadata"].(map[string]any); ok {
			delete(md, "managedFields")
		}
		items = append(items, u)
	}
	return items, ListMeta{ResourceVersion: ul.GetResourceVersion(), Continue: ul.GetContinue(), RemainingItemCount: ul.GetRemainingItemCount()}, nil
}

func directList(body []byte, f *Format) (items []runtime.Object, itemErrs []error, lm ListMeta, err error) {
	lm, err = NewDecoder(f).List(bytes.NewReader(body), func(obj runtime.Object, err error) {
		if err != nil {
			itemErrs = append(itemErrs, err)
			return
		}
		items = append(items, obj)
	})
	return items, itemErrs, lm, err
}

var widgetObject = widgetEvent[len(`{"type":"ADDED","object":`) : len(widgetEvent)-1]

var listCases = []string{
	`{"apiVersion":"bench.kinformer.io/v1","items":[` + widgetObject + `,` + widgetObject + `],"kind":"WidgetList","metadata":{"continue":"abc","resourceVersion":"99"}}`,
	// built-in types' lists leave kind and apiVersion out of their items
	`{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[{"metadata":{"name":"a","managedFields":[{}]},"data":{"k":"v"}},{"kind":"Other","metadata":{"name":"b"}},{"apiVersion":"x/v1","metadata":{"name":"c"}}]}`,
	`{"items":[{"metadata":{"name":"a"}}],"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"7"}}`,
	`{"kind":"WidgetList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[]}`,
	`{"kind":"WidgetList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":null}`,
	`{"kind":"WidgetList","apiVersion":"v1","metadata":{"resourceVersion":"1","remainingItemCount":5},"items":[{"kind":"W","n":[1,2.5,-0,1e2]}],"extra":{"x":1}}`,
}

func TestListMatchesApimachinery(t *testing.T) {
	for _, c := range listCases {
		compareList(t, []byte(c))
	}
}

func compareList(t *testing.T, body []byte) {
	t.Helper()
	want, wantMeta, wantErr := referenceList(body)
	if wantErr != nil {
		return // kinformer may read more than apimachinery does; not less
	}
	got, itemErrs, gotMeta, err := directList(body, unstructuredFormat)
	if err != nil || len(itemErrs) > 0 {
		t.Fatalf("%q: apimachinery reads it, kinformer: %v %v", body, err, itemErrs)
	}
	// Items without a kind come after the others, once the list's is known.
	sortObjects(got)
	sortObjects(want)
	if !reflect.DeepEqual(gotMeta, wantMeta) || !reflect.DeepEqual(got, want) {
		t.Fatalf("%q:\ndirect:    %+v %v\nreference: %+v %v", body, gotMeta, got, wantMeta, want)
	}
}

func sortObjects(objs []runtime.Object) {
	sort.SliceStable(objs, func(i, j int) bool { return fmt.Sprint(objs[i]) < fmt.Sprint(objs[j]) })
}

func FuzzDecodeList(f *testing.F) {
	for _, c := range listCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if bytes.Count(body, []byte("["))+bytes.Count(body, []byte("{")) > 5000 {
			return
		}
		compareList(t, body)
	})
}

// An item not understood is reported, and the others are read; a broken
// response is an error.
func TestListItemErrors(t *testing.T) {
	body := `{"kind":"WidgetList","apiVersion":"v1","metadata":{"resourceVersion":"3"},"items":[{"kind":"W","metadata":{"name":"a"}},{"kind":"W","big":1e999},7,{"kind":"W","metadata":{"name":"d"}}]}`
	got, itemErrs, lm, err := directList([]byte(body), unstructuredFormat)
	if err != nil || lm.ResourceVersion != "3" || len(got) != 2 || len(itemErrs) != 2 {
		t.Fatalf("got %d items, errors %v, meta %+v, %v", len(got), itemErrs, lm, err)
	}
	var ie *ItemError
	if !errors.As(itemErrs[0], &ie) || ie.Index != 1 || !errors.As(itemErrs[1], &ie) || ie.Index != 2 {
		t.Fatalf("item errors %v", itemErrs)
	}
	if _, _, _, err := directList([]byte(body[:len(body)-20]), unstructuredFormat); err == nil {
		t.Fatal("a truncated list read without error")
	}
	typedBody := `{"kind":"WidgetList","apiVersion":"v1","metadata":{"resourceVersion":"4"},"items":[` + widgetObject + `,{"metadata":{"name":"nokind"}},{"kind":"Gadget","metadata":{"name":"g"}}]}`
	got, itemErrs, _, err = directList([]byte(typedBody), typedFormat)
	if err != nil || len(got) != 2 || len(itemErrs) != 1 || !strings.Contains(itemErrs[0].Error(), "Gadget") {
		t.Fatalf("typed: %d items, errors %v, %v", len(got), itemErrs, err)
	}
	if w := got[0].(*widget); w.Name != "w-00001" || w.ManagedFields != nil || *w.Spec.Replicas != 3 {
		t.Fatalf("typed item %+v", w)
	}
}
