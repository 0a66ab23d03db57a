package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	authclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/sharding"
)

// serve --shard-group: several serve processes split every RESOURCE
// between them with a sharding.Sharding (one per process, shared by its
// informers), each caching and serving only its share.

const shardLong = `
--shard-group NAME splits every RESOURCE between the serve processes of
the group NAME (the same NAME, RESOURCEs and scope in each): each caches
and serves only its share, objects whose metadata.uid hashes into the
ranges it holds. Membership is a coordination.k8s.io/v1 Lease per process,
labelled kinformer.io/shard-group=NAME, in --shard-namespace (default: the
namespace of the pod serve runs in; outside a pod it must be given); the
process needs to get, list, create, update and delete Leases there (checked
at the start: exit code 6 if it may not). Whoever else may write Leases in
that namespace decides what the group serves: a Lease labelled with the
group is a member and is given a share, so use a namespace where only the
group's service account may create and update Leases. --shard-members
PATTERN,... names the identities that may be members (shell patterns, as
"widget-*"): other Leases of the group are ignored and logged. A member
that holds a share it has not synced for 4 times --lease-duration (a Lease
written by someone who is not a member, or one that cannot list) is named
in /readyz, /stats and kinformer_sharding_members_not_serving: no process
caches its objects. --shard-identity names the process in the
group, unique in it (default: HOSTNAME-PID; in a pod, whose host name is
the pod's, serve as the container's first process is POD-1 across the
container's restarts, and takes its own Lease back on restarting). A
process that dies is counted dead once its Lease has not been renewed for
--lease-duration, and its share is taken over; on SIGINT or SIGTERM it
gives its share up (the feed shows DELETED, cause "reshard", for each
object it drops) and deletes its Lease, so that the others take over at
once. Objects that move between processes are DELETED from one and ADDED
to the other, cause "reshard", never held by two at once. Where the API
server has the ShardedListAndWatch feature it sends each process only its
share; elsewhere each filters the full list and watch itself. /stats and
the page show the group's members, this process's ranges and its objects
per RESOURCE.
`

// shardFlags are serve's sharding flags.
type shardFlags struct {
	group         string
	namespace     string
	identity      string
	members       []string // shell patterns of the identities that may be members; none: any
	leaseDuration time.Duration
}

const defaultLeaseDuration = 15 * time.Second

func (f *shardFlags) bind(fs *pflag.FlagSet) {
	fs.StringVar(&f.group, "shard-group", "", "split every RESOURCE with the other serve processes of the group `NAME`; each serves only its share (see above)")
	fs.StringVar(&f.namespace, "shard-namespace", "", "the `NAMESPACE` of the shard group's Leases, one where only the group may write Leases (default: the namespace of serve's pod; required outside a pod)")
	fs.StringSliceVar(&f.members, "shard-members", nil, "the identities that may be members of the shard group, as shell `PATTERN`s (\"widget-*\"); Leases of others are ignored (default: any)")
	fs.StringVar(&f.identity, "shard-identity", "", "this process's `ID` in the shard group, unique in it (default: HOSTNAME-PID)")
	fs.DurationVar(&f.leaseDuration, "lease-duration", defaultLeaseDuration, "with --shard-group: a process whose Lease is not renewed for this long is dead, and its share is taken over; at least 2s")
}

// check validates the flags, before anything is loaded: a usage error
// naming the flag.
func (f *shardFlags) check(fs *pflag.FlagSet) error {
	if f.group == "" {
		if fs.Changed("shard-group") {
			return usageErrorf("serve: --shard-group must not be empty")
		}
		for _, name := range []string{"shard-namespace", "shard-identity", "shard-members", "lease-duration"} {
			if fs.Changed(name) {
				return usageErrorf("serve: --%s needs --shard-group", name)
			}
		}
		return nil
	}
	if msgs := validation.IsValidLabelValue(f.group); len(msgs) > 0 {
		return usageErrorf("serve: --shard-group %q: not a valid label value: %s", f.group, strings.Join(msgs, "; "))
	}
	if fs.Changed("shard-namespace") {
		if msgs := validation.IsDNS1123Label(f.namespace); len(msgs) > 0 {
			return usageErrorf("serve: --shard-namespace %q: not a valid namespace: %s", f.namespace, strings.Join(msgs, "; "))
		}
	}
	for _, p := range f.members {
		if _, err := path.Match(p, ""); err != nil || p == "" {
			return usageErrorf("serve: --shard-members %q: not a shell pattern", p)
		}
	}
	if fs.Changed("shard-identity") && strings.TrimSpace(f.identity) == "" {
		return usageErrorf("serve: --shard-identity must not be empty")
	}
	if f.leaseDuration < 2*time.Second {
		return usageErrorf("serve: --lease-duration %s: must be at least 2s", f.leaseDuration)
	}
	if f.namespace == "" && podNamespace() == "" {
		return usageErrorf("serve: --shard-group needs --shard-namespace outside a pod: a namespace where only the group's processes may write Leases")
	}
	return nil
}

// defaultIdentity is --shard-identity's default: the host name and the
// PID, unique among the processes of one host and across hosts (whose
// names differ). In a pod the host name is the pod's name and the PID is
// often 1, so a restarted container keeps its identity and takes its own
// Lease back.
func defaultIdentity() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "kinformer"
	}
	return host + "-" + strconv.Itoa(os.Getpid())
}

// podNamespaceFile is where a pod's service account token is mounted with
// the pod's namespace; a variable for the tests.
var podNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// podNamespace returns the namespace of the pod serve runs in: the
// POD_NAMESPACE environment variable (the downward API), else the service
// account's namespace file; "" outside a pod.
func podNamespace() string {
	if ns := strings.TrimSpace(os.Getenv("POD_NAMESPACE")); ns != "" {
		return ns
	}
	if b, err := os.ReadFile(podNamespaceFile); err == nil {
		return strings.TrimSpace(string(b))
	}
	return ""
}

// memberFunc is sharding.Options.Members for --shard-members: nil (any)
// without patterns.
func (f *shardFlags) memberFunc() func(string) bool {
	if len(f.members) == 0 {
		return nil
	}
	patterns := slices.Clone(f.members)
	return func(id string) bool {
		for _, p := range patterns {
			if ok, _ := path.Match(p, id); ok {
				return true
			}
		}
		return false
	}
}

// newSharding returns the process's membership in the shard group, and
// what the server shows of it; nil, nil without --shard-group. The
// group's metrics go to reg.
func (f *shardFlags) newSharding(cfg *rest.Config, stderr io.Writer, verbose bool, reg prometheus.Registerer) (*sharding.Sharding, *shardInfo, error) {
	if f.group == "" {
		return nil, nil, nil
	}
	metrics, err := sharding.NewMetrics(reg) // /metrics: kinformer_sharding_*
	if err != nil {
		return nil, nil, err
	}
	// Not -n's namespace, nor the context's, nor "default" (those of the
	// objects served, or anyone's): whoever may write Leases in the
	// group's namespace decides what the group serves, and the pod's own
	// namespace is the one its Deployment or StatefulSet already owns.
	leaseNS := f.namespace
	if leaseNS == "" {
		leaseNS = podNamespace() // check made sure there is one
	}
	id := f.identity
	if id == "" {
		id = defaultIdentity()
	}
	// Membership and share changes are few, and say what this process
	// serves: logged without -v too.
	level := slog.LevelInfo
	if verbose {
		level = slog.LevelDebug
	}
	sh := sharding.New(cfg, sharding.Options{
		Group: f.group, Namespace: leaseNS, Identity: id, LeaseDuration: f.leaseDuration, Members: f.memberFunc(),
		Logger:  slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})),
		Metrics: metrics,
	})
	return sh, &shardInfo{group: f.group, namespace: leaseNS, identity: id, status: sh.Status}, nil
}

// leaseVerbs are what a member does with the group's Leases.
var leaseVerbs = []string{"get", "list", "create", "update", "delete"}

// checkLeaseAccess asks the API server whether this user may do what a
// member does with Leases in the group's namespace. Without it the
// Sharding would retry for ever, logging, and the informers wait for a
// share that never comes: a forbidden verb is an error (exit code 6)
// before anything starts. A review that cannot be made (an old or odd
// authorizer) is no reason to stop: the Sharding's own errors will tell.
func (si *shardInfo) checkLeaseAccess(ctx context.Context, cfg *rest.Config) error {
	c, err := authclient.NewForConfig(cfg)
	if err != nil {
		return nil
	}
	var denied []string
	reason := ""
	for _, verb := range leaseVerbs {
		r, err := c.SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: si.namespace, Verb: verb, Group: "coordination.k8s.io", Resource: "leases",
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			return nil
		}
		if !r.Status.Allowed {
			denied = append(denied, verb)
			if reason == "" {
				reason = r.Status.Reason
			}
		}
	}
	if len(denied) == 0 {
		return nil
	}
	verbs := denied[0]
	if n := len(denied); n > 1 {
		verbs = strings.Join(denied[:n-1], ", ") + " or " + denied[n-1]
	}
	msg := fmt.Sprintf("serve: --shard-group: may not %s leases.coordination.k8s.io in namespace %s, as a member of a shard group must (--shard-namespace chooses the namespace)",
		verbs, si.namespace)
	if reason != "" {
		msg += ": " + reason
	}
	return &codedError{code: exitForbidden, msg: msg}
}

// shardInfo is what the server shows of the shard group.
type shardInfo struct {
	group, namespace, identity string
	status                     func() sharding.Status // the Sharding's; replaced in tests
}

func (si *shardInfo) String() string {
	return fmt.Sprintf("shard group %s as %s (Leases in namespace %s)", si.group, si.identity, si.namespace)
}

// shardingStats is /stats' "sharding": the group, its live members, and
// the share of this process.
type shardingStats struct {
	Group     string   `json:"group"`
	Namespace string   `json:"namespace"` // of the Leases
	Identity  string   `json:"identity"`
	Members   []string `json:"members"` // live, this process included, sorted
	Slots     int      `json:"slots"`   // of total, served by this process
	Total     int      `json:"total"`
	Ranges    string   `json:"ranges"`              // hash ranges of metadata.uid, or "none"
	Fenced    bool     `json:"fenced"`              // its Lease could not be renewed in time: serving nothing
	RenewedAt string   `json:"renewedAt,omitempty"` // RFC 3339, when its Lease was last renewed
	LastError string   `json:"lastError,omitempty"` // why the last renewal or read of the group failed
	// NotServing are members holding a share they have not synced past
	// the grace: no process caches its objects.
	NotServing []string `json:"notServing,omitempty"`
	Ignored    []string `json:"ignored,omitempty"` // Leases of the group refused by --shard-members
}

func (si *shardInfo) stats() *shardingStats {
	st := si.status()
	members := st.Members
	if members == nil {
		members = []string{}
	}
	out := &shardingStats{
		Group: si.group, Namespace: si.namespace, Identity: st.Identity, Members: members,
		Slots: st.Slots, Total: st.Total, Ranges: st.Ranges, Fenced: st.Fenced,
		NotServing: st.NotServing, Ignored: st.Ignored,
	}
	if !st.RenewedAt.IsZero() {
		out.RenewedAt = st.RenewedAt.UTC().Format(time.RFC3339Nano)
	}
	if st.LastError != nil {
		out.LastError = st.LastError.Error()
	}
	return out
}

// problem says why the process is not ready as a member, "" if it is.
func (si *shardInfo) problem() string {
	st := si.status()
	if st.Fenced {
		msg := "shard group " + si.group + ": fenced: the Lease could not be renewed in time; serving nothing until it is"
		if st.LastError != nil {
			msg += " (" + st.LastError.Error() + ")"
		}
		return msg
	}
	return ""
}

// notes are what /readyz says of the group under "ok": members that hold
// a share no one caches, and Leases ignored. This process is ready (what
// it serves is synced); failing its readiness would not serve the
// missing share either, and would let one foreign Lease take every
// member out of its Service.
func (si *shardInfo) notes() []string {
	st := si.status()
	var out []string
	if len(st.NotServing) > 0 {
		out = append(out, fmt.Sprintf("shard group %s: members not serving their share (no process caches its objects): %s",
			si.group, strings.Join(st.NotServing, ", ")))
	}
	if len(st.Ignored) > 0 {
		out = append(out, fmt.Sprintf("shard group %s: Leases ignored (their holders are not allowed members): %s",
			si.group, strings.Join(st.Ignored, ", ")))
	}
	return out
}

// resourceShard is /stats' "shard" of a resource: its informer's share
// and who filters it ("server": the API server, "client": the informer;
// "" until its first list tells).
type resourceShard struct {
	Mode   string `json:"mode"`
	Slots  int    `json:"slots"`
	Total  int    `json:"total"`
	Ranges string `json:"ranges"`
}

func newResourceShard(st kinformer.ShardStatus) *resourceShard {
	if !st.Sharded {
		return nil
	}
	ranges := st.Ranges
	if ranges == "" {
		ranges = "none"
	}
	return &resourceShard{Mode: st.Mode, Slots: st.Slots, Total: st.Total, Ranges: ranges}
}
