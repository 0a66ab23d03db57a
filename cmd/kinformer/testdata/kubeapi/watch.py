"""A watch of ConfigMaps of one namespace through the Kubernetes Python
client (Debian's python3-kubernetes), against a server given by URL: used
by TestServeKubeAPIPythonWatch to show that a non-Go client lists and
watches through `kinformer serve --kube-api`. It lists, prints
{"type":"listed","names":[...]}, then prints one JSON line per watch event
from the list's resourceVersion: {"type":"ADDED"|"MODIFIED"|"DELETED","name":...}.

    python3 watch.py URL NAMESPACE
"""
import json
import sys

from kubernetes import client, watch

server, namespace = sys.argv[1], sys.argv[2]
cfg = client.Configuration()
cfg.host = server
v1 = client.CoreV1Api(client.ApiClient(cfg))
listed = v1.list_namespaced_config_map(namespace)
print(json.dumps({"type": "listed", "names": sorted(o.metadata.name for o in listed.items)}), flush=True)
for e in watch.Watch().stream(v1.list_namespaced_config_map, namespace,
                              resource_version=listed.metadata.resource_version, timeout_seconds=120):
    print(json.dumps({"type": e["type"], "name": e["object"].metadata.name}), flush=True)
