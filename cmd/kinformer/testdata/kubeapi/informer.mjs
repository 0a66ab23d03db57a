// The JavaScript client's informer (@kubernetes/client-node's makeInformer)
// over ConfigMaps of one namespace, against a server given by URL: used by
// TestServeKubeAPIJavaScriptInformer to show that a non-Go client lists and
// watches through `kinformer serve --kube-api`. It prints one JSON line per
// event: {"type":"add"|"update"|"delete"|"synced"|"error","name":…}.
//
//	node informer.mjs URL NAMESPACE
import * as k8s from '@kubernetes/client-node';

const [server, namespace] = process.argv.slice(2);
const kc = new k8s.KubeConfig();
kc.loadFromOptions({
  clusters: [{ name: 'serve', server, skipTLSVerify: true }],
  users: [{ name: 'anonymous' }],
  contexts: [{ name: 'serve', cluster: 'serve', user: 'anonymous' }],
  currentContext: 'serve',
});
const api = kc.makeApiClient(k8s.CoreV1Api);
const informer = k8s.makeInformer(kc, `/api/v1/namespaces/${namespace}/configmaps`,
  () => api.listNamespacedConfigMap({ namespace }));
const say = (type, obj) => console.log(JSON.stringify({ type, name: obj?.metadata?.name, rv: obj?.metadata?.resourceVersion }));
informer.on('add', (o) => say('add', o));
informer.on('update', (o) => say('update', o));
informer.on('delete', (o) => say('delete', o));
informer.on('error', (err) => {
  console.log(JSON.stringify({ type: 'error', error: String(err) }));
  setTimeout(() => informer.start(), 500); // as the client's README does
});
await informer.start();
say('synced');
