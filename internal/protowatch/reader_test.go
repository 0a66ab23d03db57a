package protowatch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"

	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"

	"github.com/kinformer/kinformer/internal/wiretest"
)

// testReader reads body as a watch of ConfigMaps.
func testReader(body io.Reader) *Reader {
	return NewReader(io.NopCloser(body), testDecoder(false).f)
}

func length(n uint32) []byte { return binary.BigEndian.AppendUint32(nil, n) }

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// allocated returns the bytes allocated while fn ran.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A length is a claim: 64 MiB declared and a few bytes sent cost a few
// bytes, not 64 MiB, whether the stream then ends or stalls.
func TestDeclaredLengthIsNotAllocatedUpFront(t *testing.T) {
	good := wiretest.Event(t, "ADDED", wiretest.ManagedCM("a"))
	body := cat(good, length(maxFrame), bytes.Repeat([]byte{0x0a}, 100))
	r := testReader(bytes.NewReader(body))
	if _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	var err error
	n := allocated(func() { _, err = r.Next() })
	if n > 1<<20 {
		t.Fatalf("reading 100 bytes of a frame that claims %d allocated %d bytes", maxFrame, n)
	}
	if !errors.Is(err, ErrTruncated) || !strings.Contains(err.Error(), "100 bytes into a frame of 67108864") {
		t.Fatalf("a frame cut after 100 of %d bytes: %v", maxFrame, err)
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("after an unreadable stream: %v, want io.EOF", err)
	}
}

// A frame that arrives a few bytes at a time is read whole, into a buffer
// grown as it comes, and decodes as if it came at once.
func TestFrameReadInPieces(t *testing.T) {
	big := wiretest.ManagedCM("a")
	big.Data["big"] = strings.Repeat("x", 300<<10)
	body := cat(wiretest.Event(t, "ADDED", big), wiretest.Event(t, "MODIFIED", wiretest.ManagedCM("b")))
	for name, rd := range map[string]io.Reader{
		"one byte": iotest.OneByteReader(bytes.NewReader(body)),
		"halves":   iotest.HalfReader(bytes.NewReader(body)),
		"at once":  bytes.NewReader(body),
	} {
		r := testReader(rd)
		ev, err := r.Next()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want := big.DeepCopy()
		want.ManagedFields = nil
		if !reflect.DeepEqual(ev.Object, want) {
			t.Fatalf("%s: the big object differs", name)
		}
		if ev, err := r.Next(); err != nil || ev.Object.(*corev1.ConfigMap).Name != "b" {
			t.Fatalf("%s: second event %v, %v", name, ev.Object, err)
		}
		if _, err := r.Next(); err != io.EOF {
			t.Fatalf("%s: end: %v", name, err)
		}
	}
}

func TestReaderErrors(t *testing.T) {
	good := wiretest.Event(t, "ADDED", wiretest.ManagedCM("a"))
	for _, tc := range []struct {
		name string
		body []byte
		read io.Reader // instead of body
		is   error     // of the error after the good frames
		says string
	}{
		{name: "end between frames", body: good, is: io.EOF},
		{name: "2 GiB first", body: length(2 << 30), is: ErrNotProtobuf, says: "a frame of 2147483648 bytes, more than the 67108864 allowed"},
		{name: "2 GiB later", body: cat(good, length(2<<30)), is: ErrFrameTooLarge, says: "unreadable watch stream: frame too large: a frame of 2147483648 bytes"},
		{name: "JSON", body: []byte(`{"type":"ADDED","object":{}}`), is: ErrNotProtobuf, says: "frame too large"},
		{name: "cut in the length", body: cat(good, []byte{0, 0}), is: ErrTruncated, says: "the stream ended 2 bytes into a frame's 4-byte length"},
		{name: "cut in the first length", body: []byte{0}, is: ErrTruncated, says: "1 bytes into a frame's 4-byte length"},
		{name: "cut in the frame", body: good[:len(good)-3], is: ErrTruncated, says: "ended " + strconv.Itoa(len(good)-7) + " bytes into a frame of " + strconv.Itoa(len(good)-4)},
		{name: "connection lost mid-frame", read: io.MultiReader(bytes.NewReader(good[:20]), iotest.ErrReader(io.ErrUnexpectedEOF)), is: io.EOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rd := tc.read
			if rd == nil {
				rd = bytes.NewReader(tc.body)
			}
			r := testReader(rd)
			var err error
			for err == nil {
				_, err = r.Next()
			}
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("got %v, want %v saying %q", err, tc.is, tc.says)
			}
			if tc.is != io.EOF && errors.Is(err, io.EOF) {
				t.Fatalf("%v is taken for the end of the stream", err)
			}
		})
	}
}

// envelope is a WatchEvent of typ whose RawExtension holds ext.
func envelope(typ string, ext []byte) []byte {
	b := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte(typ))
	return protowire.AppendBytes(protowire.AppendTag(b, 2, protowire.BytesType), ext)
}

// Truncated varints and lengths inside a frame are reported with where and
// what, and the stream goes on.
func TestTruncatedFieldsInAFrame(t *testing.T) {
	d := testDecoder(false)
	for _, tc := range []struct {
		name  string
		frame []byte
		says  string
	}{
		{"tag varint", []byte{0x80}, "watch event: tag at byte 0 of 1: truncated: a varint or length runs past the end"},
		{"length varint", []byte{0x12, 0xff}, "watch event: field 2 at byte 0 of 2: truncated"},
		{"length past the end", []byte{0x12, 0x05, 0x0a}, "field 2 at byte 0 of 3: truncated"},
		// protobuf's own messages vary their space after "proto:" from one
		// binary to the next (to discourage matching them): match around it.
		{"varint overflow", []byte{0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, "variable length integer overflow"},
		{"envelope", envelope("ADDED", []byte{0x0a, 0xff}), "ADDED event: object: field 1 at byte 0 of 2: truncated"},
	} {
		_, err := d.decode(tc.frame)
		var ee *EventError
		if !errors.As(err, &ee) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want an EventError saying %q", tc.name, err, tc.says)
		}
		if tc.name == "varint overflow" && !strings.Contains(err.Error(), "field 1 at byte 0 of 12: proto:") {
			t.Errorf("%s: %v, want it to say where", tc.name, err)
		}
	}
}

// RawOf gives the bytes the last object was decoded from, managedFields
// cut, which decode to an equal object; for any other object, nil.
func TestRawOf(t *testing.T) {
	f := *testDecoder(false).f
	f.KeepRaw = true
	body := cat(wiretest.Event(t, "ADDED", wiretest.ManagedCM("a")), wiretest.Event(t, "MODIFIED", wiretest.ManagedCM("b")))
	r := NewReader(io.NopCloser(bytes.NewReader(body)), &f)
	ev, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	raw := r.RawOf(ev.Object)
	if raw == nil {
		t.Fatal("no bytes for the object just decoded")
	}
	again := &corev1.ConfigMap{}
	if err := again.Unmarshal(raw); err != nil {
		t.Fatal(err)
	}
	if len(again.ManagedFields) != 0 || !reflect.DeepEqual(again, ev.Object) {
		t.Fatalf("the bytes decode to %+v, want %+v", again, ev.Object)
	}
	if _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	if r.RawOf(ev.Object) != nil {
		t.Fatal("bytes for an object that is not the last one")
	}
	f.KeepRaw = false
	r = NewReader(io.NopCloser(bytes.NewReader(body)), &f)
	if ev, _ = r.Next(); r.RawOf(ev.Object) != nil {
		t.Fatal("bytes kept without KeepRaw")
	}
}
