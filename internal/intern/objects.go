package intern

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The walkers below know which fields of which types repeat between
// objects. A type they do not know still gets its metadata interned.

// strings interns the shared strings of a freshly decoded object. Its
// labels and annotations maps are left alone if skipMaps: they are already
// shared, hence read-only.
func (sh *Sharer) strings(obj any, skipMaps bool) {
	if m := ObjectMeta(obj); m != nil {
		sh.meta(m, skipMaps)
	}
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		internKeys(sh, o.Data)
		internKeys(sh, o.BinaryData)
	case *corev1.Secret:
		internKeys(sh, o.Data)
		internKeys(sh, o.StringData)
		o.Type = corev1.SecretType(sh.String(string(o.Type)))
	case *corev1.Pod:
		sh.pod(o)
	}
}

func (sh *Sharer) meta(m *metav1.ObjectMeta, skipMaps bool) {
	m.Namespace = sh.String(m.Namespace)
	m.GenerateName = sh.String(m.GenerateName)
	if !skipMaps {
		sh.internMap(m.Labels, true)
		sh.internMap(m.Annotations, false) // values: mostly unique (checksums, timestamps)
	}
	for i := range m.OwnerReferences {
		r := &m.OwnerReferences[i]
		r.APIVersion, r.Kind, r.Name = sh.String(r.APIVersion), sh.String(r.Kind), sh.String(r.Name)
	}
	for i := range m.Finalizers {
		m.Finalizers[i] = sh.String(m.Finalizers[i])
	}
}

func (sh *Sharer) pod(p *corev1.Pod) {
	s := &p.Spec
	s.NodeName = sh.String(s.NodeName)
	s.ServiceAccountName = sh.String(s.ServiceAccountName)
	s.DeprecatedServiceAccount = sh.String(s.DeprecatedServiceAccount)
	s.SchedulerName = sh.String(s.SchedulerName)
	s.PriorityClassName = sh.String(s.PriorityClassName)
	s.RestartPolicy = corev1.RestartPolicy(sh.String(string(s.RestartPolicy)))
	s.DNSPolicy = corev1.DNSPolicy(sh.String(string(s.DNSPolicy)))
	sh.internMap(s.NodeSelector, true)
	for i := range s.InitContainers {
		sh.container(&s.InitContainers[i])
	}
	for i := range s.Containers {
		sh.container(&s.Containers[i])
	}
	for i := range s.Volumes {
		v := &s.Volumes[i]
		v.Name = sh.String(v.Name)
		if v.ConfigMap != nil {
			v.ConfigMap.Name = sh.String(v.ConfigMap.Name)
		}
		if v.Secret != nil {
			v.Secret.SecretName = sh.String(v.Secret.SecretName)
		}
	}
	for i := range s.Tolerations {
		t := &s.Tolerations[i]
		t.Key, t.Value = sh.String(t.Key), sh.String(t.Value)
		t.Operator = corev1.TolerationOperator(sh.String(string(t.Operator)))
		t.Effect = corev1.TaintEffect(sh.String(string(t.Effect)))
	}
	st := &p.Status
	st.Phase = corev1.PodPhase(sh.String(string(st.Phase)))
	st.QOSClass = corev1.PodQOSClass(sh.String(string(st.QOSClass)))
	st.HostIP = sh.String(st.HostIP)
	for i := range st.Conditions {
		c := &st.Conditions[i]
		c.Type = corev1.PodConditionType(sh.String(string(c.Type)))
		c.Status = corev1.ConditionStatus(sh.String(string(c.Status)))
		c.Reason = sh.String(c.Reason)
	}
	for i := range st.ContainerStatuses {
		c := &st.ContainerStatuses[i]
		c.Name, c.Image, c.ImageID = sh.String(c.Name), sh.String(c.Image), sh.String(c.ImageID)
	}
}

func (sh *Sharer) container(c *corev1.Container) {
	c.Resources.Requests = sh.ResourceList(c.Resources.Requests)
	c.Resources.Limits = sh.ResourceList(c.Resources.Limits)
	c.Name = sh.String(c.Name)
	c.Image = sh.String(c.Image)
	c.ImagePullPolicy = corev1.PullPolicy(sh.String(string(c.ImagePullPolicy)))
	c.TerminationMessagePath = sh.String(c.TerminationMessagePath)
	c.TerminationMessagePolicy = corev1.TerminationMessagePolicy(sh.String(string(c.TerminationMessagePolicy)))
	for i := range c.Env {
		e := &c.Env[i]
		e.Name, e.Value = sh.String(e.Name), sh.String(e.Value)
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			f := e.ValueFrom.FieldRef
			f.APIVersion, f.FieldPath = sh.String(f.APIVersion), sh.String(f.FieldPath)
		}
	}
	for i := range c.Ports {
		p := &c.Ports[i]
		p.Name = sh.String(p.Name)
		p.Protocol = corev1.Protocol(sh.String(string(p.Protocol)))
	}
	for i := range c.VolumeMounts {
		m := &c.VolumeMounts[i]
		m.Name, m.MountPath = sh.String(m.Name), sh.String(m.MountPath)
	}
}
