package protowatch

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/kinformer/kinformer/internal/wiretest"
)

// An annotation whose value claims more bytes than its metadata holds
// (what FuzzLazy found on a Lazy Format that walked only the top-level
// metadata): both Formats give an Error for the event, and the Lazy one
// keeps nothing it could never read.
func TestLazyRejectsWhatDoesNotDecode(t *testing.T) {
	good := wiretest.Event(t, "ADDED", wiretest.ManagedCM("a"))
	// The 300-byte annotation value: field 2 of its map entry, length 300
	// (0xac 0x02), becomes length 12,800 (0x80 0x64), as many bytes.
	at := bytes.Index(good, append([]byte{0x12, 0xac, 0x02}, strings.Repeat("v", 10)...))
	if at < 0 {
		t.Fatal("no 300-byte annotation value in the event")
	}
	bad := bytes.Clone(good)
	bad[at+1], bad[at+2] = 0x80, 0x64
	stream := append(bad, good...)

	for _, lazy := range []bool{false, true} {
		f := *testDecoder(false).f
		f.Lazy = lazy
		r := NewReader(io.NopCloser(bytes.NewReader(stream)), &f)
		_, err := r.Next()
		var ee *EventError
		if !errors.As(err, &ee) {
			t.Fatalf("lazy=%v: first event: %v, want an EventError", lazy, err)
		}
		ev, err := r.Next()
		if err != nil {
			t.Fatalf("lazy=%v: the stream did not go on: %v", lazy, err)
		}
		if _, isRaw := ev.Object.(*Raw); isRaw != lazy {
			t.Fatalf("lazy=%v: the good event's object is %T", lazy, ev.Object)
		}
	}
}

// checked are objects as a server sends them, with every kind of field a
// Check walks: maps of strings and of messages (Quantity), times, nested
// and repeated messages, and IntOrString.
func checked(t *testing.T) []Object {
	now := metav1.NewTime(time.Unix(1700000000, 0))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u", ResourceVersion: "9",
			CreationTimestamp: now, Labels: map[string]string{"app": "x"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "o"}}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "c", Image: "i",
				Ports: []corev1.ContainerPort{{ContainerPort: 80}},
				Resources: corev1.ResourceRequirements{
					Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")},
					Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
					HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromString("http")}}},
			}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &now,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}},
	}
	return []Object{wiretest.ManagedCM("a"), pod}
}

// What a server sends passes (or Lazy would never apply), and a Check
// never passes bytes the type's Unmarshal refuses, over many random
// corruptions of them.
func TestCheckAgreesWithUnmarshal(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, obj := range checked(t) {
		typ := reflect.TypeOf(obj).Elem()
		c := CheckOf(typ)
		if c == nil {
			t.Fatalf("%s: no Check", typ)
		}
		b, err := obj.(interface{ Marshal() ([]byte, error) }).Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if !c.Valid(b) {
			t.Fatalf("%s: the Check refuses the bytes of a valid object", typ)
		}
		passed := 0
		for range 3000 {
			m := bytes.Clone(b)
			for range 1 + rng.IntN(3) {
				switch i := rng.IntN(len(m)); rng.IntN(3) {
				case 0:
					m[i] = byte(rng.IntN(256))
				case 1:
					m = append(m[:i], m[i+1:]...)
				default:
					m = append(m[:i], append([]byte{byte(rng.IntN(256))}, m[i:]...)...)
				}
			}
			if !c.Valid(m) {
				continue
			}
			passed++
			if err := reflect.New(typ).Interface().(Object).Unmarshal(m); err != nil {
				t.Fatalf("%s: the Check passes bytes Unmarshal refuses (%v): %x", typ, err, m)
			}
		}
		if passed == 0 {
			t.Fatalf("%s: the Check passed no corrupted bytes at all; the test shows nothing", typ)
		}
	}
}

// Types a Check cannot vouch for have none, and their objects are decoded.
func TestCheckOfNonMessages(t *testing.T) {
	for _, typ := range []reflect.Type{reflect.TypeFor[int](), reflect.TypeFor[struct{ A int }](), reflect.TypeFor[resource.Quantity]()} {
		if c := CheckOf(typ); c != nil {
			t.Errorf("%s has a Check", typ)
		}
	}
}

// node is a recursive type, as JSONSchemaProps is.
type node struct {
	Name string `protobuf:"bytes,1,opt,name=name"`
	Kids []node `protobuf:"bytes,2,rep,name=kids"`
	N    int32  `protobuf:"varint,3,opt,name=n"`
}

func TestCheckRecursiveType(t *testing.T) {
	c := CheckOf(reflect.TypeFor[node]())
	if c == nil {
		t.Fatal("no Check")
	}
	msg := func(fields ...[]byte) []byte { return bytes.Join(fields, nil) }
	str := func(num protowire.Number, s string) []byte {
		return protowire.AppendString(protowire.AppendTag(nil, num, protowire.BytesType), s)
	}
	sub := func(num protowire.Number, b []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), b)
	}
	n := func(v uint64) []byte {
		return protowire.AppendVarint(protowire.AppendTag(nil, 3, protowire.VarintType), v)
	}
	for _, tc := range []struct {
		name string
		b    []byte
		want bool
	}{
		{"nested", msg(str(1, "a"), sub(2, msg(str(1, "b"), n(7), sub(2, str(1, "c"))))), true},
		{"unknown field skipped", msg(str(1, "a"), str(9, "x")), true},
		{"a varint where a message is, deep", msg(sub(2, sub(2, n(1)[1:]))), false},
		{"a string where a varint is", msg(sub(2, str(3, "x"))), false},
		{"a group", msg(protowire.AppendTag(nil, 9, protowire.StartGroupType)), false},
		{"nested length past its parent", msg(sub(2, append(protowire.AppendTag(nil, 1, protowire.BytesType), 50, 'x'))), false},
		{"deeper than maxDepth", func() []byte {
			b := str(1, "leaf")
			for range maxDepth + 1 {
				b = sub(2, b)
			}
			return b
		}(), false},
	} {
		if got := c.Valid(tc.b); got != tc.want {
			t.Errorf("%s: Valid = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// The cost of a Check on a Pod as a server sends it, beside its decode.
//
//	go test -run '^$' -bench BenchmarkCheck ./internal/protowatch
func BenchmarkCheck(b *testing.B) {
	t := &testing.T{}
	pod := checked(t)[1]
	data, err := pod.(interface{ Marshal() ([]byte, error) }).Marshal()
	if err != nil {
		b.Fatal(err)
	}
	c := CheckOf(reflect.TypeOf(pod).Elem())
	b.Run("check", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if !c.Valid(data) {
				b.Fatal("refused")
			}
		}
	})
	b.Run("unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := (&corev1.Pod{}).Unmarshal(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// Every kind of client-go's scheme, and every message reachable from one:
// each field number with each wire type, holding small values (and, in a
// message field, each such input of the message), passes its Check only
// if the kind's Unmarshal accepts it. This is where hand-written tags that
// lie (a varint tag on an IntOrString) and types with an Unmarshal of
// their own (ExtraValue, Verbs) are found.
func TestCheckEveryKind(t *testing.T) {
	payloads := map[protowire.Type][][]byte{
		protowire.VarintType:  {{0x01}, {0x80, 0x01}},
		protowire.Fixed32Type: {{1, 0, 0, 0}},
		protowire.Fixed64Type: {{1, 0, 0, 0, 0, 0, 0, 0}},
		protowire.BytesType:   {{}, {0x00}, {0x08, 0x01}, {0x0a, 0x01, 'x'}, {0x12, 0x01, 'x'}, {'1'}},
	}
	// inputs returns one-field messages for c, and for each message field
	// of c its own inputs inside it, expanding each Check once overall.
	expanded := map[*Check]bool{}
	var inputs func(c *Check, depth int) [][]byte
	inputs = func(c *Check, depth int) [][]byte {
		if c == nil || c.leaf != nil || expanded[c] || depth > 8 {
			return nil
		}
		expanded[c] = true
		var out [][]byte
		for num := protowire.Number(1); int(num) <= len(c.fields)+1; num++ {
			for typ, ps := range payloads {
				for _, p := range ps {
					b := protowire.AppendTag(nil, num, typ)
					if typ == protowire.BytesType {
						b = protowire.AppendBytes(b, p)
					} else {
						b = append(b, p...)
					}
					out = append(out, b)
				}
			}
			if int(num) < len(c.fields) && c.fields[num].msg != nil {
				for _, in := range inputs(c.fields[num].msg, depth+1) {
					out = append(out, protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), in))
				}
			}
		}
		return out
	}
	kinds, tried := 0, 0
	for gvk, typ := range scheme.Scheme.AllKnownTypes() {
		c := CheckOf(typ)
		if c == nil {
			continue
		}
		kinds++
		for _, in := range inputs(c, 0) {
			tried++
			if !c.Valid(in) {
				continue
			}
			if err := reflect.New(typ).Interface().(Object).Unmarshal(in); err != nil {
				t.Errorf("%s: the Check passes %x, Unmarshal refuses it: %v", gvk, in, err)
			}
		}
	}
	if kinds < 100 || tried < 10000 {
		t.Fatalf("%d kinds, %d inputs: the sweep shows little", kinds, tried)
	}
}

// Objects as a server sends them pass, with the fields whose tags lie:
// the Check follows the Go types, as the generated code does.
func TestCheckPassesWhatServersSend(t *testing.T) {
	prio := int32(0)
	for _, obj := range []Object{
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: corev1.PodSpec{Priority: &prio,
			SecurityContext: &corev1.PodSecurityContext{SupplementalGroups: []int64{1, 2}}}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s"}},
	} {
		b, err := obj.(interface{ Marshal() ([]byte, error) }).Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if c := CheckOf(reflect.TypeOf(obj).Elem()); c == nil || !c.Valid(b) {
			t.Errorf("%T: the Check refuses the bytes of a valid object", obj)
		}
	}
}
