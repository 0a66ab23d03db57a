package main

// serve's help: what `kinformer serve --help` prints above its flags.

const serveLong = `
Keeps one informer per RESOURCE and serves their caches read-only over
HTTP, until interrupted (SIGINT or SIGTERM). It serves at once; /readyz
says when every cache has synced and is being kept up to date. RESOURCE is resolved as for watch; -n,
-A, -l, --field-selector and --resync apply to every RESOURCE.

--namespace-selector SELECTOR serves each namespaced RESOURCE in the
namespaces whose labels match SELECTOR, one watch per namespace, and
follows the Namespace objects as watch does: a namespace labelled later
joins (its objects' events have cause "join"), one unlabelled or deleted
leaves (DELETED, cause "leave"). Cluster-scoped RESOURCEs are served whole.
On /metrics the informers of a RESOURCE add up under its name (and the
watch of the Namespace objects counts under "namespaces"). A namespace
where a RESOURCE may not be listed and watched stops serve at start
(forbidden, naming it); with --skip-forbidden-namespaces it is left out
instead, said on stderr, and checked again every minute. Not with
--shard-group.

It listens on 127.0.0.1:8080 unless told otherwise, and warns on stderr
when bound to an address other hosts can reach: there is no
authentication, and the objects served may be confidential (secrets!).
While bound to a loopback address it answers only requests for
localhost, 127.0.0.1 or [::1] (any port), and those whose host name
--accept-hosts matches as a whole (kinformer\.internal does not match
kinformer.internal.evil.example; serve warns of a "." left unescaped,
which matches any character); others get 403. This keeps a web page
from reading it by rebinding its own name to 127.0.0.1 (DNS rebinding).

A client has 30 s for each write to it (an event stream writes at least
every 20 s); one that stops reading is cut off. An event stream ends
after 10 minutes with "event: reconnect": a client that holds one
without reading holds it no longer (EventSource reconnects by itself,
and /events/feed resumes where it stopped). At most 16 /objects requests
are served at once, and --max-sse-clients clients of /events and as many
of /events/feed (counted apart, so that the page's feed stays
reachable); beyond, 503 with Retry-After. A label selector may be at most 4 KiB, a request's headers
32 KiB (beyond: 431), and they must arrive within 10 s. At most
--max-connections connections, event streams included, are open at
once; more wait until one closes, and idle keep-alive connections, and
connections still sending their first request's head after 2 s, are
closed to make room.

Endpoints (GET only):
  /                  a live page: object counts, events per second, the
                     recent events (filterable) and any cached object
  /objects?resource=R[&namespace=N][&label=SELECTOR]
                     the cached objects of R (required when serving more
                     than one resource), sorted by key, as
                     {"resource":…,"resourceVersion":…,"items":[…],"count":…}
  /objects/R/NAMESPACE/NAME, /objects/R/NAME (cluster-scoped)
                     one cached object, or a 404 {"error":…}; add
                     ?format=yaml for YAML: at most 8 MiB of it (beyond,
                     406: an object nested deep), 4 answers at once
                     (beyond, 503 with Retry-After)
  /events?resource=R server-sent events from now on: each "data:" line is
                     a JSON event shaped like watch -o json's lines. Each
                     client has a buffer of up to --sse-buffer events and
                     16 MiB; a client that falls further behind gets
                     "event: overflow" and is disconnected, so that it
                     never holds up an informer. Each event has an id: a
                     client back with Last-Event-ID (EventSource sends
                     it) is first told how many it missed ("event:
                     missed"; the events are not kept: re-read /objects)
  /events/recent[?resource=R][&namespace=N]
                     the last --recent-events events of every RESOURCE
                     (bookmarks aside), oldest first, summarised without
                     objects: {"events":[{"seq":…,"time":…,"resource":…,
                     "type":…,"cause":…,"namespace":…,"name":…,
                     "resourceVersion":…},…]}. A name longer than 253
                     bytes is cut, visibly ("start…[200000 bytes,
                     sha256:0a1b2c3d4e5f]"), and "nameBytes" is its length
  /events/feed[?resource=R][&namespace=N]
                     the same events as server-sent events, then new ones
                     as they come; each has an id, so that a client
                     resumes after a reconnection (Last-Event-ID) and is
                     told how many it missed ("event: missed")
  /stats             counts, the last minute's events per second and
                     whether each cache is compact ("compact"), how its
                     start went ("startup": seconds to the first complete
                     list and until it was handled, objects of the
                     expected total) (JSON);
                     with --shard-group, the group's members and this
                     process's share ("sharding") and each resource's
                     ("shard": its ranges, and who filters: "server" or
                     "client")
  /metrics           Prometheus metrics: the informers' (kinformer_events_total,
                     kinformer_requests_total, kinformer_objects, …, labelled
                     by resource), kinformer_sse_clients,
                     kinformer_sse_dropped_total and kinformer_build_info
  /healthz           200 while the process runs
  /readyz            200 "ok" when every informer has synced and none fails
                     persistently; else 503 with a line per resource that
                     is not ready, and why: "configmaps: not synced", or
                     its error (a permission lost after syncing: the cache
                     is frozen) and for how long; a ready resource that
                     lost its watch and waits to reconnect adds a line
                     under "ok": "configmaps: reconnecting (since 12s)…"
  /api/…, /apis/…, /version
                     with --kube-api: the Kubernetes API's own paths, read
                     only, answered from the caches: discovery, get, list
                     (label and field selectors, limit and continue) and
                     watch (from a resourceVersion of the last
                     --kube-api-history MiB of events, bookmarks,
                     watch-list), JSON (and protobuf for built-in
                     types), with the API server's Status errors; point
                     client-go, kubectl (--server) or any client at it

--state-dir DIR keeps each cache in a file in DIR, and a restarted serve
with the same flags starts from them: it serves the objects as they were
at once, /readyz says "not synced: restored, catching up" until the
informers have applied what changed meanwhile, and the feed shows the
restored objects as ADDED with cause "restore". Once a resource has
caught up, one line on stderr says so: "restored 1,234 configmaps from
FILE (rv 5678), caught up in 412ms". A file that cannot be used is
reported on stderr and set aside; that resource lists as usual.
--state-key-file FILE (or $KINFORMER_STATE_KEY) encrypts the objects in
the files; without it Secrets are not kept.

serve answers anyone who can reach --listen: on loopback, every process
and user of this machine. --token-file FILE requires the token in FILE
(its first line) on every request but /healthz: "Authorization: Bearer
TOKEN", or, in a browser, open /?token=TOKEN once (it is kept in an
HttpOnly cookie); /readyz without it says only whether serve is ready.
--tls-cert-file and --tls-private-key-file serve HTTPS (HTTP/1.1; the
files are read again when they change, so a renewed certificate needs no
restart), and --client-ca-file lets a client certificate signed by one of
its CAs read, as the token does (either is enough); --client-cert-names
lets in only those Common Names (without it, with the cluster's CA, every
node and component reads). Beyond loopback, use TLS: a token over plain
HTTP crosses the network in clear. Serving secrets without a token, or
client CAs with --client-cert-names, is refused unless
--serve-secrets-without-token.

--compact keeps each cached object as bytes (its JSON, managedFields cut)
instead of decoded, and decodes it for every request that reads it: far
less memory for a large cache, a decode per object served (/objects lists
of thousands take longer). The objects served are the same. With
--state-dir the file holds the same bytes, and a restart loads them
without decoding. /stats says which caches are compact.

R is a RESOURCE as given on the command line or its resolved name
(configmaps; deployments.apps, or deployments if no other group's). A RESOURCE whose list fails in a way
retrying cannot fix (forbidden, bad selector) stops serve with the exit
code watch would give.
`
