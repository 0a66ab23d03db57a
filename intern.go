package kinformer

import (
	"encoding/binary"
	"slices"
	"unique"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Interning. Decoding gives every object its own copy of every string, but
// across a cluster most short strings repeat: the namespace, label keys and
// values, annotation keys, owner kinds, the keys of a ConfigMap's data, a
// pod's image, container and volume names. Each copy costs a heap
// allocation of 16–48 bytes; intern makes objects share one copy through
// the standard library's unique package, which frees a string once no
// handle to it is left. Values are unchanged, so interning is invisible to
// readers. Only short strings are interned: long ones are rarely shared.

const internMax = 64 // longer strings are left alone

func intern(s string) string {
	if s == "" || len(s) > internMax {
		return s
	}
	return unique.Make(s).Value()
}

// internMap interns the keys, and the values if values is set, of m in
// place. Assigning to an existing key stores the given key string too.
func internMap(m map[string]string, values bool) {
	for k, v := range m {
		if values {
			v = intern(v)
		}
		m[intern(k)] = v
	}
}

func internKeys[V any](m map[string]V) {
	for k, v := range m {
		m[intern(k)] = v
	}
}

// objectMeta returns the ObjectMeta of a typed object, or nil (for
// Unstructured, whose accessors return copies).
func objectMeta(obj any) *metav1.ObjectMeta {
	if a, ok := obj.(metav1.ObjectMetaAccessor); ok {
		if m, ok := a.GetObjectMeta().(*metav1.ObjectMeta); ok {
			return m
		}
	}
	return nil
}

// internObject interns the shared strings of a freshly decoded object that
// nothing else references yet. Its labels and annotations maps are left
// alone if skipMaps: they are already shared, hence read-only.
func internObject(obj any, skipMaps bool) {
	if m := objectMeta(obj); m != nil {
		internMeta(m, skipMaps)
	}
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		internKeys(o.Data)
		internKeys(o.BinaryData)
	case *corev1.Secret:
		internKeys(o.Data)
		internKeys(o.StringData)
		o.Type = corev1.SecretType(intern(string(o.Type)))
	case *corev1.Pod:
		internPod(o)
	}
}

func internMeta(m *metav1.ObjectMeta, skipMaps bool) {
	m.Namespace = intern(m.Namespace)
	m.GenerateName = intern(m.GenerateName)
	if !skipMaps {
		internMap(m.Labels, true)
		internMap(m.Annotations, false) // values: mostly unique (checksums, timestamps)
	}
	for i := range m.OwnerReferences {
		r := &m.OwnerReferences[i]
		r.APIVersion, r.Kind, r.Name = intern(r.APIVersion), intern(r.Kind), intern(r.Name)
	}
	for i := range m.Finalizers {
		m.Finalizers[i] = intern(m.Finalizers[i])
	}
}

func internPod(p *corev1.Pod) {
	s := &p.Spec
	s.NodeName = intern(s.NodeName)
	s.ServiceAccountName = intern(s.ServiceAccountName)
	s.DeprecatedServiceAccount = intern(s.DeprecatedServiceAccount)
	s.SchedulerName = intern(s.SchedulerName)
	s.PriorityClassName = intern(s.PriorityClassName)
	s.RestartPolicy = corev1.RestartPolicy(intern(string(s.RestartPolicy)))
	s.DNSPolicy = corev1.DNSPolicy(intern(string(s.DNSPolicy)))
	internMap(s.NodeSelector, true)
	for i := range s.InitContainers {
		internContainer(&s.InitContainers[i])
	}
	for i := range s.Containers {
		internContainer(&s.Containers[i])
	}
	for i := range s.Volumes {
		v := &s.Volumes[i]
		v.Name = intern(v.Name)
		if v.ConfigMap != nil {
			v.ConfigMap.Name = intern(v.ConfigMap.Name)
		}
		if v.Secret != nil {
			v.Secret.SecretName = intern(v.Secret.SecretName)
		}
	}
	for i := range s.Tolerations {
		t := &s.Tolerations[i]
		t.Key, t.Value = intern(t.Key), intern(t.Value)
		t.Operator = corev1.TolerationOperator(intern(string(t.Operator)))
		t.Effect = corev1.TaintEffect(intern(string(t.Effect)))
	}
	st := &p.Status
	st.Phase = corev1.PodPhase(intern(string(st.Phase)))
	st.QOSClass = corev1.PodQOSClass(intern(string(st.QOSClass)))
	st.HostIP = intern(st.HostIP)
	for i := range st.Conditions {
		c := &st.Conditions[i]
		c.Type = corev1.PodConditionType(intern(string(c.Type)))
		c.Status = corev1.ConditionStatus(intern(string(c.Status)))
		c.Reason = intern(c.Reason)
	}
	for i := range st.ContainerStatuses {
		c := &st.ContainerStatuses[i]
		c.Name, c.Image, c.ImageID = intern(c.Name), intern(c.Image), intern(c.ImageID)
	}
}

func internContainer(c *corev1.Container) {
	c.Name = intern(c.Name)
	c.Image = intern(c.Image)
	c.ImagePullPolicy = corev1.PullPolicy(intern(string(c.ImagePullPolicy)))
	c.TerminationMessagePath = intern(c.TerminationMessagePath)
	c.TerminationMessagePolicy = corev1.TerminationMessagePolicy(intern(string(c.TerminationMessagePolicy)))
	for i := range c.Env {
		e := &c.Env[i]
		e.Name, e.Value = intern(e.Name), intern(e.Value)
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			f := e.ValueFrom.FieldRef
			f.APIVersion, f.FieldPath = intern(f.APIVersion), intern(f.FieldPath)
		}
	}
	for i := range c.Ports {
		p := &c.Ports[i]
		p.Name = intern(p.Name)
		p.Protocol = corev1.Protocol(intern(string(p.Protocol)))
	}
	for i := range c.VolumeMounts {
		m := &c.VolumeMounts[i]
		m.Name, m.MountPath = intern(m.Name), intern(m.MountPath)
	}
}

// genTable remembers values by key in two generations of up to
// tableGeneration entries each: an entry not used for two generations is
// forgotten, so keys that never repeat cost a bounded table, not one entry
// per object forever. It is not safe for concurrent use.
type genTable[V any] struct {
	recent, old map[string]V
}

const tableGeneration = 2048

// get looks key up; string(key) in a map index does not allocate.
func (g *genTable[V]) get(key []byte) (V, bool) {
	if v, ok := g.recent[string(key)]; ok {
		return v, true
	}
	if v, ok := g.old[string(key)]; ok {
		g.put(string(key), v)
		return v, true
	}
	var zero V
	return zero, false
}

func (g *genTable[V]) put(key string, v V) {
	if g.recent == nil || len(g.recent) >= tableGeneration {
		g.old, g.recent = g.recent, make(map[string]V)
	}
	g.recent[key] = v
}

func (g *genTable[V]) len() int { return len(g.recent) + len(g.old) }

// mapPool lets objects with equal labels (or equal annotations) share one
// map: the pods of a ReplicaSet, the objects of one Helm release. A small
// map costs about 350 bytes before its strings, often more than the rest
// of an object's metadata. Objects in the cache are read-only, so sharing
// is invisible to readers; it is done after Options.Transform, which may
// still modify its object. (Without a Transform, the direct decoder shares
// maps before they are even decoded: see frameDecoder.)
//
// Maps are remembered in a genTable, so labels unique to each object (a
// StatefulSet pod's name) cost a bounded table. It belongs to the
// informer's loop goroutine.
type mapPool struct {
	maps genTable[map[string]string]
	keys []string // scratch: sorted keys
	buf  []byte   // scratch: the lookup key
}

const (
	mapPoolMaxBytes   = 1024 // larger maps (last-applied-configuration) are rarely shared
	mapPoolMaxEntries = 32
)

// share returns a map equal to m that an earlier object already holds, or m
// itself, remembered for the next objects.
func (p *mapPool) share(m map[string]string) map[string]string {
	if len(m) == 0 || len(m) > mapPoolMaxEntries {
		return m
	}
	keys, size := p.keys[:0], 0
	for k, v := range m {
		keys = append(keys, k)
		size += len(k) + len(v)
	}
	if size > mapPoolMaxBytes {
		return m
	}
	slices.Sort(keys)
	buf := p.buf[:0]
	for _, k := range keys {
		v := m[k]
		buf = binary.AppendUvarint(buf, uint64(len(k)))
		buf = append(buf, k...)
		buf = binary.AppendUvarint(buf, uint64(len(v)))
		buf = append(buf, v...)
	}
	clear(keys) // do not pin the strings
	p.keys, p.buf = keys, buf
	if shared, ok := p.maps.get(buf); ok {
		return shared
	}
	p.maps.put(string(buf), m)
	return m
}

// shrink makes a new object share what it can: interned strings, and the
// labels and annotations maps of earlier objects.
func (p *mapPool) shrink(obj any) {
	internObject(obj, false)
	if m := objectMeta(obj); m != nil {
		m.Labels = p.share(m.Labels)
		m.Annotations = p.share(m.Annotations)
	}
}
