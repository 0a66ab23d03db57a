package kinformer

import (
	"encoding/binary"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Sharing. Decoding gives every object its own copy of every string and
// map, but across a cluster most short strings repeat — the namespace, label
// keys and values, annotation keys, owner kinds, the keys of a ConfigMap's
// data, a pod's image, container and volume names — and so do whole label
// and annotation maps (the pods of a ReplicaSet, the objects of one Helm
// release). Each string copy costs a heap allocation of 16–48 bytes, each
// small map about 350 bytes before its strings. A sharer makes objects
// share one copy of each. Values are unchanged and cached objects are
// read-only, so this is invisible to readers.
//
// A sharer remembers what it has seen in bounded tables (genTable): a
// string or map not seen again for two generations is forgotten, so what
// never repeats (a StatefulSet pod's name label, a Job's controller-uid)
// costs a bounded table, not an entry per object forever. A plain map
// lookup is several times cheaper than unique.Make, which must turn a weak
// pointer back into a strong one on every hit.
//
// A sharer is not safe for concurrent use: the informer has one for the
// objects its loop shares after decoding, and its direct decoder one for
// the maps it shares by wire bytes; both are used by the loop's goroutine.
type sharer struct {
	strs genTable[string]
	maps genTable[map[string]string]
	res  genTable[corev1.ResourceList] // containers' requests and limits
	keys []string                      // scratch: sorted keys
	buf  []byte                        // scratch: a map's lookup key
}

const (
	internMax         = 64   // longer strings are rarely shared
	mapPoolMaxBytes   = 1024 // larger maps (last-applied-configuration) are rarely shared
	mapPoolMaxEntries = 32
)

// intern returns a string equal to s that an earlier object holds, or s,
// remembered for the next objects. s must be a copy of its own (as decoders
// make), never a slice of a reused buffer.
func (sh *sharer) intern(s string) string {
	if s == "" || len(s) > internMax {
		return s
	}
	if v, ok := sh.strs.lookup(s); ok {
		return v
	}
	sh.strs.put(s, s)
	return s
}

// internMap interns the keys, and the values if values is set, of m in
// place. Assigning to an existing key stores the given key string too.
func (sh *sharer) internMap(m map[string]string, values bool) {
	for k, v := range m {
		if values {
			v = sh.intern(v)
		}
		m[sh.intern(k)] = v
	}
}

func internKeys[V any](sh *sharer, m map[string]V) {
	for k, v := range m {
		m[sh.intern(k)] = v
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
func (sh *sharer) internObject(obj any, skipMaps bool) {
	if m := objectMeta(obj); m != nil {
		sh.internMeta(m, skipMaps)
	}
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		internKeys(sh, o.Data)
		internKeys(sh, o.BinaryData)
	case *corev1.Secret:
		internKeys(sh, o.Data)
		internKeys(sh, o.StringData)
		o.Type = corev1.SecretType(sh.intern(string(o.Type)))
	case *corev1.Pod:
		sh.internPod(o)
	}
}

func (sh *sharer) internMeta(m *metav1.ObjectMeta, skipMaps bool) {
	m.Namespace = sh.intern(m.Namespace)
	m.GenerateName = sh.intern(m.GenerateName)
	if !skipMaps {
		sh.internMap(m.Labels, true)
		sh.internMap(m.Annotations, false) // values: mostly unique (checksums, timestamps)
	}
	for i := range m.OwnerReferences {
		r := &m.OwnerReferences[i]
		r.APIVersion, r.Kind, r.Name = sh.intern(r.APIVersion), sh.intern(r.Kind), sh.intern(r.Name)
	}
	for i := range m.Finalizers {
		m.Finalizers[i] = sh.intern(m.Finalizers[i])
	}
}

func (sh *sharer) internPod(p *corev1.Pod) {
	s := &p.Spec
	s.NodeName = sh.intern(s.NodeName)
	s.ServiceAccountName = sh.intern(s.ServiceAccountName)
	s.DeprecatedServiceAccount = sh.intern(s.DeprecatedServiceAccount)
	s.SchedulerName = sh.intern(s.SchedulerName)
	s.PriorityClassName = sh.intern(s.PriorityClassName)
	s.RestartPolicy = corev1.RestartPolicy(sh.intern(string(s.RestartPolicy)))
	s.DNSPolicy = corev1.DNSPolicy(sh.intern(string(s.DNSPolicy)))
	sh.internMap(s.NodeSelector, true)
	for i := range s.InitContainers {
		sh.internContainer(&s.InitContainers[i])
	}
	for i := range s.Containers {
		sh.internContainer(&s.Containers[i])
	}
	for i := range s.Volumes {
		v := &s.Volumes[i]
		v.Name = sh.intern(v.Name)
		if v.ConfigMap != nil {
			v.ConfigMap.Name = sh.intern(v.ConfigMap.Name)
		}
		if v.Secret != nil {
			v.Secret.SecretName = sh.intern(v.Secret.SecretName)
		}
	}
	for i := range s.Tolerations {
		t := &s.Tolerations[i]
		t.Key, t.Value = sh.intern(t.Key), sh.intern(t.Value)
		t.Operator = corev1.TolerationOperator(sh.intern(string(t.Operator)))
		t.Effect = corev1.TaintEffect(sh.intern(string(t.Effect)))
	}
	st := &p.Status
	st.Phase = corev1.PodPhase(sh.intern(string(st.Phase)))
	st.QOSClass = corev1.PodQOSClass(sh.intern(string(st.QOSClass)))
	st.HostIP = sh.intern(st.HostIP)
	for i := range st.Conditions {
		c := &st.Conditions[i]
		c.Type = corev1.PodConditionType(sh.intern(string(c.Type)))
		c.Status = corev1.ConditionStatus(sh.intern(string(c.Status)))
		c.Reason = sh.intern(c.Reason)
	}
	for i := range st.ContainerStatuses {
		c := &st.ContainerStatuses[i]
		c.Name, c.Image, c.ImageID = sh.intern(c.Name), sh.intern(c.Image), sh.intern(c.ImageID)
	}
}

func (sh *sharer) internContainer(c *corev1.Container) {
	c.Resources.Requests = sh.shareResources(c.Resources.Requests)
	c.Resources.Limits = sh.shareResources(c.Resources.Limits)
	c.Name = sh.intern(c.Name)
	c.Image = sh.intern(c.Image)
	c.ImagePullPolicy = corev1.PullPolicy(sh.intern(string(c.ImagePullPolicy)))
	c.TerminationMessagePath = sh.intern(c.TerminationMessagePath)
	c.TerminationMessagePolicy = corev1.TerminationMessagePolicy(sh.intern(string(c.TerminationMessagePolicy)))
	for i := range c.Env {
		e := &c.Env[i]
		e.Name, e.Value = sh.intern(e.Name), sh.intern(e.Value)
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			f := e.ValueFrom.FieldRef
			f.APIVersion, f.FieldPath = sh.intern(f.APIVersion), sh.intern(f.FieldPath)
		}
	}
	for i := range c.Ports {
		p := &c.Ports[i]
		p.Name = sh.intern(p.Name)
		p.Protocol = corev1.Protocol(sh.intern(string(p.Protocol)))
	}
	for i := range c.VolumeMounts {
		m := &c.VolumeMounts[i]
		m.Name, m.MountPath = sh.intern(m.Name), sh.intern(m.MountPath)
	}
}

// genTable remembers values by key in two generations of up to
// tableGeneration entries each: an entry not used for two generations is
// forgotten. It is not safe for concurrent use.
type genTable[V any] struct {
	recent, old map[string]V
}

const tableGeneration = 4096

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

func (g *genTable[V]) lookup(key string) (V, bool) {
	if v, ok := g.recent[key]; ok {
		return v, true
	}
	if v, ok := g.old[key]; ok {
		g.put(key, v)
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

// share returns a map equal to m that an earlier object already holds, or m
// itself, remembered for the next objects.
//
// Sharing is done after Options.Transform, which may still modify its
// object. (Without a Transform, the direct decoder shares maps before they
// are even decoded, by their wire bytes: see frameDecoder.rewriteMeta.)
func (p *sharer) share(m map[string]string) map[string]string {
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
func (p *sharer) shrink(obj any) {
	p.internObject(obj, false)
	if m := objectMeta(obj); m != nil {
		m.Labels = p.share(m.Labels)
		m.Annotations = p.share(m.Annotations)
	}
}

// shareResources returns a resource list equal to m that an earlier
// container holds, or m itself, remembered for the next ones. A list of a
// few quantities costs over 600 bytes, and the containers of one workload
// all ask for the same. Quantities are equal when their canonical strings
// and formats are: the same value, shown the same way.
func (sh *sharer) shareResources(m corev1.ResourceList) corev1.ResourceList {
	if len(m) == 0 || len(m) > mapPoolMaxEntries {
		return m
	}
	keys := sh.keys[:0]
	for k := range m {
		keys = append(keys, string(k))
	}
	slices.Sort(keys)
	buf := sh.buf[:0]
	for _, k := range keys {
		q := m[corev1.ResourceName(k)] // a copy: String may cache into it
		v := q.String()
		buf = binary.AppendUvarint(buf, uint64(len(k)))
		buf = append(buf, k...)
		buf = binary.AppendUvarint(buf, uint64(len(v)))
		buf = append(buf, v...)
		buf = append(buf, q.Format...)
		buf = append(buf, 0)
	}
	clear(keys)
	sh.keys, sh.buf = keys, buf
	if shared, ok := sh.res.get(buf); ok {
		return shared
	}
	sh.res.put(string(buf), m)
	return m
}
