package rbac_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/tests/helm"
	"github.com/fleet-role/fleet-role/tests/kubeapi"
	"github.com/fleet-role/fleet-role/tests/testhost"
)

// The namespaces the holds are configured in, as docs/controller-and-cli.md
// and the chart's values suggest.
const (
	kuredNamespace   = "kube-system"
	upgradeNamespace = "system-upgrade"
)

// holdValues render the chart as packaged (the namespace made) with the
// holds that are granted something: kured's DaemonSet and the
// system-upgrade-controller's Plans. They grant more than the packaged
// render, which is a part of theirs.
var holdValues = map[string]any{
	"namespace": map[string]any{"create": true},
	"holds": map[string]any{
		"kured":                 map[string]any{"namespace": kuredNamespace},
		"upgradePlansNamespace": upgradeNamespace,
	},
}

// defaultValues render the chart as packaged: the holds on by default,
// kured's DaemonSet and the Plans looked for in every namespace.
var defaultValues = map[string]any{"namespace": map[string]any{"create": true}}

// everyOptionalPart renders every optional part of the chart: the holds,
// the notifications' Secret, people's access, and the monitoring objects.
var everyOptionalPart = map[string]any{
	"namespace": map[string]any{"create": true},
	"holds": map[string]any{
		"kured":                 map[string]any{"namespace": kuredNamespace},
		"upgradePlansNamespace": upgradeNamespace,
		"prometheus":            map[string]any{"url": "http://prometheus.monitoring:9090"},
	},
	"notify": map[string]any{"urls": []any{"generic://hooks.example.org/fleet"}, "secretName": "fleet-role-notify"},
	"access": map[string]any{
		"operators": []any{map[string]any{"kind": "Group", "name": "sre", "apiGroup": "rbac.authorization.k8s.io"}},
		"viewers":   []any{map[string]any{"kind": "Group", "name": "dev", "apiGroup": "rbac.authorization.k8s.io"}},
	},
	"metrics": map[string]any{
		"serviceMonitor": map[string]any{"enabled": true},
		"prometheusRule": map[string]any{"enabled": true},
		"dashboard":      map[string]any{"enabled": true},
	},
}

// agentTemplate is the agent's RBAC as the Ansible role fleet_role_agent
// renders it for each host.
func agentTemplate() string {
	return filepath.Join(testhost.Root(), "packaging", "kubernetes", "agent-rbac.yaml.j2")
}

// agentRBAC renders the agent's RBAC for a host. The Ansible role renders
// it with template_vars={'node_name': ...} and nothing else
// (ansible/roles/fleet_role_agent/tasks/credentials.yml); the template's
// one piece of Jinja is that variable, which the check of what is left
// keeps true.
func agentRBAC(t *testing.T, node string) []byte {
	t.Helper()
	b, err := os.ReadFile(agentTemplate())
	require.NoError(t, err)
	out := strings.ReplaceAll(string(b), "{{ node_name }}", node)
	for _, delim := range []string{"{{", "{%", "{#"} {
		require.NotContains(t, out, delim, "the template holds Jinja other than {{ node_name }}: render it as Ansible does")
	}
	return []byte(out)
}

// account is a ServiceAccount as the API server authenticates its tokens:
// the user name and groups of k8s.io/apiserver's
// pkg/authentication/serviceaccount (MakeUsername, MakeGroupNames), and
// system:authenticated, which every authenticated request carries.
type account struct{ namespace, name string }

func (a account) user() string { return "system:serviceaccount:" + a.namespace + ":" + a.name }

func (a account) groups() []string {
	return []string{"system:serviceaccounts", "system:serviceaccounts:" + a.namespace, "system:authenticated"}
}

var controllerAccount = account{api.Namespace, "fleet-role-controller"}

func agentAccount(node string) account { return account{api.Namespace, "fleet-role-agent-" + node} }

// request is a request to the API server as RBAC judges it. A resource
// "pods/eviction" is the pods resource's eviction subresource; a path is a
// non-resource URL. A list or watch with the field selector
// metadata.name=NAME is the request with that name: the API server takes
// the name from the selector (k8s.io/apiserver's pkg/endpoints/request,
// RequestInfoFactory.NewRequestInfo), and RBAC judges resourceNames by it.
type request struct {
	verb, group, resource, namespace, name string
	path                                   string
	// why says where the code makes the request, or why it must not.
	why string
}

// review asks the API server whether who may make the request.
func review(t *testing.T, c kubernetes.Interface, who account, r request) bool {
	t.Helper()
	spec := authorizationv1.SubjectAccessReviewSpec{User: who.user(), Groups: who.groups()}
	if r.path != "" {
		spec.NonResourceAttributes = &authorizationv1.NonResourceAttributes{Verb: r.verb, Path: r.path}
	} else {
		resource, sub, _ := strings.Cut(r.resource, "/")
		spec.ResourceAttributes = &authorizationv1.ResourceAttributes{Verb: r.verb, Group: r.group,
			Resource: resource, Subresource: sub, Namespace: r.namespace, Name: r.name}
	}
	out, err := c.AuthorizationV1().SubjectAccessReviews().Create(context.Background(),
		&authorizationv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
	require.NoError(t, err)
	require.Empty(t, out.Status.EvaluationError, "%s: %+v", who.user(), r)
	return out.Status.Allowed
}

// controllerUses is every request the controller makes, from its code.
func controllerUses() []request {
	ns, beats := api.Namespace, api.NodeLeaseNamespace
	return []request{
		{verb: "list", resource: "nodes", why: "controller/cache.go newCache: the Nodes informer lists every Node"},
		{verb: "watch", resource: "nodes", why: "controller/cache.go newCache: the Nodes informer watches every Node"},
		{verb: "get", resource: "nodes", name: "a1", why: "controller/execute.go uncordon: the Node read again after a refused patch"},
		{verb: "patch", resource: "nodes", name: "a1", why: "controller/execute.go patchNode: the cordon, the roles, the swap's annotations and taints"},
		{verb: "list", resource: "pods", why: "controller/cache.go watchPods (a Node's Pods, field selector spec.nodeName, every namespace) and the drain helper's GetPodsForDeletion (k8s.io/kubectl/pkg/drain, drain.go)"},
		{verb: "watch", resource: "pods", why: "controller/cache.go watchPods: a Node's Pods informer"},
		{verb: "get", resource: "pods", namespace: "apps", name: "web", why: "the drain helper's waitForDelete reads each evicted Pod until it is gone (k8s.io/kubectl/pkg/drain, drain.go)"},
		{verb: "create", resource: "pods/eviction", namespace: "apps", name: "web", why: "controller/execute.go drain: the drain helper's evictPods (PolicyV1().Evictions, k8s.io/kubectl/pkg/drain, drain.go)"},
		{verb: "get", group: "apps", resource: "daemonsets", namespace: "monitoring", name: "node-exporter", why: "the drain helper's daemonSetFilter reads a DaemonSet Pod's owner, in any namespace (k8s.io/kubectl/pkg/drain, filters.go)"},
		{verb: "get", path: "/api/v1", why: "the drain helper's CheckEvictionSupport reads the core API's resources (discovery, k8s.io/kubectl/pkg/drain, drain.go)"},
		{verb: "list", group: "discovery.k8s.io", resource: "endpointslices", namespace: metav1.NamespaceDefault, name: "kubernetes", why: "daemon/apiservers Watch (cmd/fleet-role/cluster.go followServers): the apiservers, field selector metadata.name"},
		{verb: "watch", group: "discovery.k8s.io", resource: "endpointslices", namespace: metav1.NamespaceDefault, name: "kubernetes", why: "daemon/apiservers Watch: the apiservers, field selector metadata.name"},
		{verb: "get", path: "/readyz", why: "daemon/apiservers ReadyzCheck: every apiserver's health checked (Kubernetes' system:public-info-viewer)"},
		{verb: "list", group: "coordination.k8s.io", resource: "leases", namespace: beats, why: "controller/cache.go newCache: the kubelets' heartbeats informer"},
		{verb: "watch", group: "coordination.k8s.io", resource: "leases", namespace: beats, why: "controller/cache.go newCache: the kubelets' heartbeats informer"},
		{verb: "list", group: "coordination.k8s.io", resource: "leases", namespace: ns, name: api.LeaseName, why: "controller/cache.go newCache: the regrade Lease's informer, field selector metadata.name=regrade"},
		{verb: "watch", group: "coordination.k8s.io", resource: "leases", namespace: ns, name: api.LeaseName, why: "controller/cache.go newCache: the regrade Lease's informer, field selector metadata.name=regrade"},
		{verb: "create", group: "coordination.k8s.io", resource: "leases", namespace: ns, why: "controller/execute.go acquire: the regrade Lease where there is none; and the election Lease (client-go's resourcelock LeaseLock.Create)"},
		{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: ns, name: api.LeaseName, why: "controller/execute.go acquire, renew and end: the regrade Lease taken, renewed and released"},
		{verb: "get", group: "coordination.k8s.io", resource: "leases", namespace: ns, name: api.LeaderElectionLease, why: "controller/controller.go Run: the replicas' election (client-go's resourcelock LeaseLock.Get)"},
		{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: ns, name: api.LeaderElectionLease, why: "controller/controller.go Run: the election Lease renewed and released (client-go's resourcelock LeaseLock.Update)"},
		{verb: "list", resource: "configmaps", namespace: ns, name: api.StatusConfigMap, why: "controller/cache.go newCache: the status ConfigMap's informer, field selector metadata.name=fleet-role-status"},
		{verb: "watch", resource: "configmaps", namespace: ns, name: api.StatusConfigMap, why: "controller/cache.go newCache: the status ConfigMap's informer"},
		{verb: "create", resource: "configmaps", namespace: ns, why: "controller/execute.go updateStatus: the status ConfigMap where there is none"},
		{verb: "update", resource: "configmaps", namespace: ns, name: api.StatusConfigMap, why: "controller/execute.go updateStatus: status.json written"},
		{verb: "create", resource: "configmaps", namespace: ns, why: "controller/notify.go saveNotifyQueue: the status ConfigMap where there is none, with notify-queue.json"},
		{verb: "update", resource: "configmaps", namespace: ns, name: api.StatusConfigMap, why: "controller/notify.go saveNotifyQueue: notify-queue.json, the notifications not sent yet, written"},
		{verb: "get", resource: "configmaps", namespace: ns, name: api.StatusConfigMap, why: "cmd/fleet-role run in the controller's Pod (kubectl exec, docs/controller-and-cli.md): swap, pause, resume and status read the status by get (cmd/fleet-role/status.go, pause.go, controller.go)"},
		{verb: "get", group: "coordination.k8s.io", resource: "leases", namespace: ns, name: api.LeaseName, why: "cmd/fleet-role run in the controller's Pod: swap reads the regrade Lease by get (cmd/fleet-role/controller.go)"},
		{verb: "create", resource: "events", namespace: metav1.NamespaceDefault, why: "controller/controller.go: Events on Nodes, which client-go puts in default (tools/record/event.go makeEvent)"},
		{verb: "patch", resource: "events", namespace: metav1.NamespaceDefault, why: "controller/controller.go: the event broadcaster patches a repeated Event's count (client-go tools/record/event.go recordToSink)"},
		{verb: "get", group: "apps", resource: "daemonsets", namespace: kuredNamespace, name: "kured", why: "controller/holds.go kured: kured's lock annotation on its DaemonSet"},
		{verb: "patch", group: "coordination.k8s.io", resource: "leases", namespace: ns, name: api.WritesLease, why: "controller/writes.go write: the Lease renewed to time a swap's cost to the cluster's writes"},
		{verb: "update", group: "apps", resource: "daemonsets", namespace: kuredNamespace, name: "kured", why: "controller/marks.go writeLock: kured's lock held while a swap runs, written as kured's pkg/daemonsetlock writes it (Update)"},
		{verb: "list", group: "upgrade.cattle.io", resource: "plans", namespace: upgradeNamespace, why: "controller/holds.go upgrades: the system-upgrade-controller's Plans"},
		{verb: "get", group: "actions.github.com", resource: "ephemeralrunners", namespace: "arc-runners", name: "runner-7kq2p", why: "controller/jobs.go read: the job a runner pod a swap waits on runs, from its EphemeralRunner, in any namespace"},
	}
}

// forbiddenToAll are requests neither the controller nor an agent makes.
func forbiddenToAll() []request {
	ns := api.Namespace
	return []request{
		{verb: "get", resource: "secrets", namespace: ns, name: "fleet-role-notify", why: "no Secret, not even in fleet-role's namespace (the notifications' Secret is mounted)"},
		{verb: "list", resource: "secrets", why: "no Secret in any namespace"},
		{verb: "list", resource: "secrets", namespace: "kube-system", why: "no Secret in kube-system"},
		{verb: "watch", resource: "secrets", why: "no watch of Secrets"},
		{verb: "get", resource: "configmaps", namespace: metav1.NamespaceDefault, name: api.StatusConfigMap, why: "no ConfigMap in another namespace"},
		{verb: "update", resource: "configmaps", namespace: metav1.NamespaceDefault, name: api.StatusConfigMap, why: "no ConfigMap in another namespace"},
		{verb: "list", resource: "configmaps", namespace: ns, why: "no list of its namespace's ConfigMaps"},
		{verb: "get", resource: "configmaps", namespace: ns, name: "fleet-role-controller-config", why: "not the controller's configuration (it is mounted)"},
		{verb: "update", resource: "configmaps", namespace: ns, name: "fleet-role-controller-config", why: "not the controller's configuration"},
		{verb: "delete", resource: "configmaps", namespace: ns, name: api.StatusConfigMap, why: "the status is written, never deleted"},
		{verb: "get", group: "coordination.k8s.io", resource: "leases", namespace: "kube-system", name: "kube-controller-manager", why: "no Lease in another namespace"},
		{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: "kube-system", name: "kube-scheduler", why: "no Lease in another namespace"},
		{verb: "create", group: "coordination.k8s.io", resource: "leases", namespace: metav1.NamespaceDefault, why: "no Lease in another namespace"},
		{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: api.NodeLeaseNamespace, name: "a1", why: "a kubelet's heartbeat is read, not written"},
		{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: ns, name: "other", why: "no Lease of fleet-role's namespace but its own"},
		{verb: "list", group: "coordination.k8s.io", resource: "leases", namespace: ns, why: "no list of every Lease of fleet-role's namespace"},
		{verb: "delete", group: "coordination.k8s.io", resource: "leases", namespace: ns, name: api.LeaseName, why: "the regrade Lease is released, not deleted"},
		{verb: "create", resource: "nodes", why: "no Node made"},
		{verb: "delete", resource: "nodes", name: "a1", why: "no Node deleted"},
		{verb: "update", resource: "nodes", name: "a1", why: "a Node is patched, never replaced whole"},
		{verb: "update", resource: "nodes/status", name: "a1", why: "a Node's status is the kubelet's"},
		{verb: "patch", resource: "nodes/status", name: "a1", why: "a Node's status is the kubelet's"},
		{verb: "create", resource: "pods", namespace: "apps", why: "no Pod made"},
		{verb: "delete", resource: "pods", namespace: "apps", name: "web", why: "Pods are evicted, never deleted"},
		{verb: "create", resource: "pods/exec", namespace: "apps", name: "web", why: "no exec in a Pod"},
		{verb: "get", resource: "pods/exec", namespace: "apps", name: "web", why: "no exec in a Pod (a WebSocket's GET)"},
		{verb: "create", resource: "pods/attach", namespace: "apps", name: "web", why: "no attach to a Pod"},
		{verb: "escalate", group: "rbac.authorization.k8s.io", resource: "clusterroles", name: "fleet-role-controller", why: "no role widened"},
		{verb: "escalate", group: "rbac.authorization.k8s.io", resource: "roles", namespace: ns, name: "fleet-role-controller", why: "no role widened"},
		{verb: "bind", group: "rbac.authorization.k8s.io", resource: "clusterroles", name: "cluster-admin", why: "no role bound"},
		{verb: "create", group: "rbac.authorization.k8s.io", resource: "clusterrolebindings", why: "no role bound"},
		{verb: "impersonate", resource: "users", name: "admin", why: "no impersonation"},
		{verb: "impersonate", resource: "groups", name: "system:masters", why: "no impersonation"},
		{verb: "impersonate", resource: "serviceaccounts", namespace: ns, name: "fleet-role-controller", why: "no impersonation"},
		{verb: "create", resource: "serviceaccounts/token", namespace: "kube-system", name: "clusterrole-aggregation-controller", why: "no token of another ServiceAccount"},
		{verb: "list", group: "apps", resource: "daemonsets", why: "no list of every DaemonSet"},
		{verb: "watch", group: "apps", resource: "daemonsets", why: "no watch of every DaemonSet"},
		{verb: "list", group: "apps", resource: "daemonsets", namespace: kuredNamespace, why: "kured's DaemonSet is read by name"},
		{verb: "patch", group: "apps", resource: "daemonsets", namespace: kuredNamespace, name: "kured", why: "kured's lock is written by update, as kured writes it"},
		{verb: "update", group: "apps", resource: "daemonsets", namespace: kuredNamespace, name: "other", why: "no DaemonSet but kured's is written"},
		{verb: "update", group: "apps", resource: "deployments", namespace: ns, name: "fleet-role-controller", why: "no Deployment changed"},
		{verb: "get", group: "upgrade.cattle.io", resource: "plans", namespace: upgradeNamespace, name: "server", why: "the Plans are listed, nothing else"},
		{verb: "update", group: "upgrade.cattle.io", resource: "plans", namespace: upgradeNamespace, name: "server", why: "a Plan is read, never changed"},
		{verb: "list", group: "upgrade.cattle.io", resource: "plans", namespace: metav1.NamespaceDefault, why: "the Plans of the configured namespace only"},
		{verb: "delete", resource: "events", namespace: metav1.NamespaceDefault, name: "any", why: "Events are made, never deleted"},
		{verb: "create", group: "events.k8s.io", resource: "events", namespace: metav1.NamespaceDefault, why: "the event recorders write core/v1 Events (client-go tools/record)"},
		{verb: "get", resource: "namespaces", name: ns, why: "no Namespace read"},
	}
}

// controllerMustNot are requests the controller must not make, besides
// forbiddenToAll.
func controllerMustNot() []request {
	return []request{
		{verb: "create", resource: "serviceaccounts/token", namespace: api.Namespace, name: "fleet-role-controller", why: "the controller's token is the kubelet's to mint, not its own"},
		{verb: "create", resource: "serviceaccounts/token", namespace: api.Namespace, name: "fleet-role-agent-h1", why: "no token of an agent"},
		{verb: "watch", group: "coordination.k8s.io", resource: "leases", namespace: api.Namespace, name: api.LeaderElectionLease, why: "the election Lease is read by get, never watched"},
		{verb: "list", group: "actions.github.com", resource: "ephemeralrunners", why: "an EphemeralRunner is read by get, one per runner pod waited on, never listed"},
		{verb: "update", group: "actions.github.com", resource: "ephemeralrunners", namespace: "arc-runners", name: "runner-7kq2p", why: "an EphemeralRunner is read, never written"},
	}
}

// agentUses is every request the agent of node makes, from its code.
func agentUses(node string) []request {
	return []request{
		{verb: "list", resource: "nodes", name: node, why: "daemon/kube.go newNodeClient: its Node's informer, field selector metadata.name"},
		{verb: "watch", resource: "nodes", name: node, why: "daemon/kube.go newNodeClient: its Node's informer, field selector metadata.name"},
		{verb: "patch", resource: "nodes", name: node, why: "daemon/kube.go annotate: its probe, and daemon/reporter.go's reports, by a merge patch"},
		{verb: "create", resource: "events", namespace: metav1.NamespaceDefault, why: "daemon/kube.go event: Events on its Node, which client-go puts in default (tools/record/event.go makeEvent)"},
		{verb: "patch", resource: "events", namespace: metav1.NamespaceDefault, why: "daemon/kube.go: the event broadcaster patches a repeated Event's count (client-go tools/record/event.go recordToSink)"},
		{verb: "create", resource: "serviceaccounts/token", namespace: api.Namespace, name: "fleet-role-agent-" + node, why: "daemon/token.go renew: a TokenRequest for its own ServiceAccount"},
		{verb: "list", group: "discovery.k8s.io", resource: "endpointslices", namespace: metav1.NamespaceDefault, name: "kubernetes", why: "daemon/apiservers Watch: the apiservers, field selector metadata.name"},
		{verb: "watch", group: "discovery.k8s.io", resource: "endpointslices", namespace: metav1.NamespaceDefault, name: "kubernetes", why: "daemon/apiservers Watch: the apiservers, field selector metadata.name"},
		{verb: "get", path: "/readyz", why: "daemon/apiservers ReadyzCheck: every apiserver's health checked (Kubernetes' system:public-info-viewer)"},
		{verb: "list", group: "coordination.k8s.io", resource: "leases", namespace: api.Namespace, name: api.LeaseName, why: "daemon/apiservers FollowSwaps: the regrade Lease's swap record, field selector metadata.name"},
		{verb: "watch", group: "coordination.k8s.io", resource: "leases", namespace: api.Namespace, name: api.LeaseName, why: "daemon/apiservers FollowSwaps: the regrade Lease's swap record, field selector metadata.name"},
	}
}

// agentMustNot are requests the agent of node must not make, besides
// forbiddenToAll; other is another host.
func agentMustNot(node, other string) []request {
	return []request{
		{verb: "patch", resource: "nodes", name: other, why: "not another host's Node"},
		{verb: "get", resource: "nodes", name: other, why: "not another host's Node"},
		{verb: "watch", resource: "nodes", name: other, why: "not another host's Node"},
		{verb: "list", resource: "nodes", why: "no list of every Node"},
		{verb: "watch", resource: "nodes", why: "no watch of every Node"},
		{verb: "delete", resource: "nodes", name: node, why: "not even its own Node deleted"},
		{verb: "update", resource: "nodes/status", name: node, why: "its Node's status is the kubelet's"},
		{verb: "patch", resource: "nodes/status", name: node, why: "its Node's status is the kubelet's"},
		{verb: "create", resource: "serviceaccounts/token", namespace: api.Namespace, name: "fleet-role-agent-" + other, why: "no token of another host's agent"},
		{verb: "create", resource: "serviceaccounts/token", namespace: api.Namespace, name: "fleet-role-controller", why: "no token of the controller"},
		{verb: "create", resource: "serviceaccounts/token", namespace: metav1.NamespaceDefault, name: "fleet-role-agent-" + node, why: "no token of a ServiceAccount of its name elsewhere"},
		{verb: "get", resource: "configmaps", namespace: api.Namespace, name: api.StatusConfigMap, why: "the status is the controller's and people's"},
		{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: api.Namespace, name: api.LeaseName, why: "the regrade Lease is the controller's, read and never written"},
		{verb: "list", group: "coordination.k8s.io", resource: "leases", namespace: api.Namespace, why: "the regrade Lease alone, by name, not every Lease"},
		{verb: "get", group: "coordination.k8s.io", resource: "leases", namespace: api.Namespace, name: api.LeaderElectionLease, why: "not the replicas' election"},
		{verb: "list", group: "coordination.k8s.io", resource: "leases", namespace: api.NodeLeaseNamespace, why: "the kubelets' heartbeats are the controller's to read"},
		{verb: "create", resource: "pods/eviction", namespace: "apps", name: "web", why: "no drain"},
		{verb: "list", resource: "pods", why: "no Pod read"},
		{verb: "get", group: "apps", resource: "daemonsets", namespace: kuredNamespace, name: "kured", why: "the holds are the controller's"},
		{verb: "list", group: "discovery.k8s.io", resource: "endpointslices", namespace: metav1.NamespaceDefault, why: "the apiservers' slice alone, by name, not every slice"},
		{verb: "list", group: "discovery.k8s.io", resource: "endpointslices", namespace: "kube-system", name: "kubernetes", why: "not a slice of that name elsewhere"},
		{verb: "update", group: "discovery.k8s.io", resource: "endpointslices", namespace: metav1.NamespaceDefault, name: "kubernetes", why: "the apiservers' slice is read, never written"},
	}
}

// cluster is an API server holding the shipped RBAC: the chart's render
// with the holds, and the agents' of hosts h1 and h2, whose Nodes exist.
func cluster(t *testing.T) *kubeapi.Server {
	t.Helper()
	kube := kubeapi.Start(t)
	kubeapi.Apply(t, kube.Client, []byte("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: "+upgradeNamespace+"\n"))
	b, err := helm.Render(api.Namespace, holdValues)
	require.NoError(t, err)
	kubeapi.Apply(t, kube.Client, b)
	for _, node := range []string{"h1", "h2"} {
		kubeapi.Apply(t, kube.Client, agentRBAC(t, node))
		_, err := kube.Client.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	return kube
}

func TestTheShippedRBACAllowsWhatTheCodeDoesAndRefusesTheRest(t *testing.T) {
	kube := cluster(t)

	t.Run("the controller may make every request its code makes", func(t *testing.T) {
		for _, r := range controllerUses() {
			assert.True(t, review(t, kube.Client, controllerAccount, r), "allowed: %s %s %s/%s %s: %s", r.verb, r.resource, r.namespace, r.name, r.path, r.why)
		}
	})
	t.Run("the controller may not make the requests it must not", func(t *testing.T) {
		for _, r := range append(forbiddenToAll(), controllerMustNot()...) {
			assert.False(t, review(t, kube.Client, controllerAccount, r), "refused: %s %s/%s %s/%s: %s", r.verb, r.group, r.resource, r.namespace, r.name, r.why)
		}
	})
	for _, hosts := range [][2]string{{"h1", "h2"}, {"h2", "h1"}} {
		node, other := hosts[0], hosts[1]
		t.Run("the agent of "+node+" may make every request its code makes", func(t *testing.T) {
			for _, r := range agentUses(node) {
				assert.True(t, review(t, kube.Client, agentAccount(node), r), "allowed: %s %s %s/%s: %s", r.verb, r.resource, r.namespace, r.name, r.why)
			}
		})
		t.Run("the agent of "+node+" may not make the requests it must not, nor touch "+other, func(t *testing.T) {
			for _, r := range append(forbiddenToAll(), agentMustNot(node, other)...) {
				assert.False(t, review(t, kube.Client, agentAccount(node), r), "refused: %s %s/%s %s/%s: %s", r.verb, r.group, r.resource, r.namespace, r.name, r.why)
			}
		})
	}
	// Nobody else is granted any of it: the reviews judge the bindings,
	// not a role every ServiceAccount has.
	t.Run("another ServiceAccount of fleet-role's namespace may make none of those requests", func(t *testing.T) {
		for _, r := range append(controllerUses(), agentUses("h1")...) {
			if r.path != "" {
				continue // discovery is everyone's (system:discovery)
			}
			assert.False(t, review(t, kube.Client, account{api.Namespace, "default"}, r), "refused: %s %s %s/%s", r.verb, r.resource, r.namespace, r.name)
		}
	})

	// The requests themselves, made as each ServiceAccount through the
	// administrator's right to impersonate, get what the reviews said.
	as := func(a account) kubernetes.Interface {
		cfg := rest.CopyConfig(kube.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: a.user()}
		c, err := kubernetes.NewForConfig(cfg)
		require.NoError(t, err)
		return c
	}
	t.Run("a request as the controller gets what the review answered", func(t *testing.T) {
		ctx := context.Background()
		c := as(controllerAccount)
		_, err := c.CoreV1().Secrets(api.Namespace).Get(ctx, "fleet-role-notify", metav1.GetOptions{})
		assert.True(t, apierrors.IsForbidden(err), "a Secret of its own namespace: %v", err)
		_, err = c.CoreV1().Secrets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		assert.True(t, apierrors.IsForbidden(err), "every Secret: %v", err)
		err = c.CoreV1().Nodes().Delete(ctx, "h1", metav1.DeleteOptions{})
		assert.True(t, apierrors.IsForbidden(err), "a Node deleted: %v", err)
		_, err = c.AppsV1().DaemonSets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		assert.True(t, apierrors.IsForbidden(err), "every DaemonSet: %v", err)
		nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		require.NoError(t, err, "the Nodes, which it watches")
		assert.Len(t, nodes.Items, 2)
		_, err = c.CoordinationV1().Leases(api.Namespace).List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("metadata.name", api.LeaseName).String()})
		assert.NoError(t, err, "the regrade Lease, by its name's field selector")
	})
	t.Run("a request as an agent gets what the review answered", func(t *testing.T) {
		ctx := context.Background()
		c := as(agentAccount("h1"))
		patch := []byte(`{"metadata":{"annotations":{"example.org/test":"h1"}}}`)
		_, err := c.CoreV1().Nodes().Patch(ctx, "h1", types.MergePatchType, patch, metav1.PatchOptions{})
		assert.NoError(t, err, "its own Node")
		_, err = c.CoreV1().Nodes().Patch(ctx, "h2", types.MergePatchType, patch, metav1.PatchOptions{})
		assert.True(t, apierrors.IsForbidden(err), "another host's Node: %v", err)
		own, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", "h1").String()})
		require.NoError(t, err, "its own Node, by its name's field selector")
		assert.Len(t, own.Items, 1)
		_, err = c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		assert.True(t, apierrors.IsForbidden(err), "every Node: %v", err)
		_, err = c.CoreV1().Secrets(api.Namespace).List(ctx, metav1.ListOptions{})
		assert.True(t, apierrors.IsForbidden(err), "the Secrets: %v", err)
	})
}

// shippedRBAC is a role or binding as shipped, from the manifest where.
type shippedRBAC struct {
	where string
	kind  string
	name  string
	rules []rbacv1.PolicyRule
	// aggregated says a ClusterRole gathers rules of others.
	aggregated bool
	roleRef    rbacv1.RoleRef
}

// readRBAC reads the roles and bindings of a multi-document manifest,
// whatever else it holds (a ServiceMonitor, say, which client-go's scheme
// does not know).
func readRBAC(t *testing.T, where string, manifest []byte) []shippedRBAC {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(manifest)))
	var out []shippedRBAC
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err, where)
		var obj struct {
			APIVersion      string                  `json:"apiVersion"`
			Kind            string                  `json:"kind"`
			Metadata        metav1.ObjectMeta       `json:"metadata"`
			Rules           []rbacv1.PolicyRule     `json:"rules"`
			AggregationRule *rbacv1.AggregationRule `json:"aggregationRule"`
			RoleRef         rbacv1.RoleRef          `json:"roleRef"`
		}
		require.NoError(t, yaml.Unmarshal(doc, &obj), "%s:\n%s", where, doc)
		if !strings.HasPrefix(obj.APIVersion, rbacv1.GroupName+"/") {
			continue
		}
		out = append(out, shippedRBAC{where: where, kind: obj.Kind, name: obj.Metadata.Namespace + "/" + obj.Metadata.Name,
			rules: obj.Rules, aggregated: obj.AggregationRule != nil, roleRef: obj.RoleRef})
	}
}

// wildcards are the fields of a rule that hold a "*".
func wildcards(r rbacv1.PolicyRule) []string {
	var out []string
	for field, values := range map[string][]string{
		"apiGroups": r.APIGroups, "resources": r.Resources, "verbs": r.Verbs,
		"resourceNames": r.ResourceNames, "nonResourceURLs": r.NonResourceURLs,
	} {
		for _, v := range values {
			if strings.Contains(v, "*") {
				out = append(out, fmt.Sprintf("%s: %q", field, v))
			}
		}
	}
	return out
}

func TestNoRuleShippedHoldsAWildcard(t *testing.T) {
	var shipped []shippedRBAC
	b, err := helm.Render(api.Namespace, everyOptionalPart)
	require.NoError(t, err)
	shipped = append(shipped, readRBAC(t, "the chart's render with every optional part", b)...)
	packaged, err := os.ReadFile(filepath.Join(testhost.Root(), "packaging", "kubernetes", "controller.yaml"))
	require.NoError(t, err)
	shipped = append(shipped, readRBAC(t, "packaging/kubernetes/controller.yaml", packaged)...)
	shipped = append(shipped, readRBAC(t, "packaging/kubernetes/agent-rbac.yaml.j2 rendered for h1", agentRBAC(t, "h1"))...)

	roles := map[string]bool{}
	count := map[string]int{}
	for _, s := range shipped {
		switch s.kind {
		case "ClusterRole", "Role":
			roles[s.kind+" "+s.name] = true
			count[s.where] += len(s.rules)
			assert.False(t, s.aggregated, "%s %s in %s gathers rules of others, which this scan cannot see", s.kind, s.name, s.where)
			for _, r := range s.rules {
				assert.Empty(t, wildcards(r), "%s %s in %s: %+v", s.kind, s.name, s.where, r)
			}
		}
	}
	// Every binding binds a role shipped, scanned above: none of the
	// cluster's own (cluster-admin, edit, view), whose rules hold "*".
	for _, s := range shipped {
		if s.kind != "ClusterRoleBinding" && s.kind != "RoleBinding" {
			continue
		}
		ns, _, _ := strings.Cut(s.name, "/")
		ref := "ClusterRole /" + s.roleRef.Name
		if s.roleRef.Kind == "Role" {
			ref = "Role " + ns + "/" + s.roleRef.Name
		}
		assert.True(t, roles[ref], "%s %s in %s binds %s, which is not shipped", s.kind, s.name, s.where, ref)
	}
	// The scan read each manifest's rules: the controller's, the holds',
	// people's access and the agent's.
	assert.GreaterOrEqual(t, count["the chart's render with every optional part"], 14)
	assert.Greater(t, count["packaging/kubernetes/controller.yaml"], 0)
	assert.Greater(t, count["packaging/kubernetes/agent-rbac.yaml.j2 rendered for h1"], 0)
	assert.True(t, roles["Role "+kuredNamespace+"/fleet-role-controller-kured"], "the kured hold's Role was rendered")
	assert.True(t, roles["Role "+upgradeNamespace+"/fleet-role-controller-upgrades"], "the upgrade hold's Role was rendered")
}

// The packaged render, which kubectl apply and the Ansible role
// fleet_role_controller apply, is the default render (tests/helm checks
// it); its RBAC is a part of the render with the holds tested above.
func TestThePackagedRBACIsTheDefaultRenderTested(t *testing.T) {
	packaged, err := os.ReadFile(filepath.Join(testhost.Root(), "packaging", "kubernetes", "controller.yaml"))
	require.NoError(t, err)
	b, err := helm.Render(api.Namespace, defaultValues)
	require.NoError(t, err)
	tested := map[string]shippedRBAC{}
	for _, s := range readRBAC(t, "default", b) {
		tested[s.kind+" "+s.name] = s
	}
	rbac := readRBAC(t, "packaged", packaged)
	require.NotEmpty(t, rbac)
	for _, s := range rbac {
		got, ok := tested[s.kind+" "+s.name]
		if assert.True(t, ok, "%s %s is in the render tested", s.kind, s.name) {
			assert.Equal(t, s.rules, got.rules, "%s %s", s.kind, s.name)
			assert.Equal(t, s.roleRef, got.roleRef, "%s %s", s.kind, s.name)
		}
	}
}

func TestTheDefaultRBACLetsTheControllerFindKuredAndThePlansAndWriteNoDaemonSetButKureds(t *testing.T) {
	kube := kubeapi.Start(t)
	b, err := helm.Render(api.Namespace, defaultValues)
	require.NoError(t, err)
	kubeapi.Apply(t, kube.Client, b)
	for _, r := range []request{
		{verb: "list", group: "apps", resource: "daemonsets", why: "controller/holds.go kuredTarget: kured's DaemonSet looked for in every namespace, by its label and by its name"},
		{verb: "get", group: "apps", resource: "daemonsets", namespace: "kured", name: "kured", why: "controller/holds.go kured: the lock read on the DaemonSet found"},
		{verb: "update", group: "apps", resource: "daemonsets", namespace: "kured", name: "kured", why: "controller/marks.go: kured's lock held on the DaemonSet found while a swap runs"},
		{verb: "list", group: "upgrade.cattle.io", resource: "plans", why: "controller/holds.go upgrades: the Plans of every namespace, while their CRD is installed"},
	} {
		assert.True(t, review(t, kube.Client, controllerAccount, r), "allowed: %s %s/%s %s/%s: %s", r.verb, r.group, r.resource, r.namespace, r.name, r.why)
	}
	for _, r := range []request{
		{verb: "update", group: "apps", resource: "daemonsets", namespace: "kube-system", name: "other", why: "no DaemonSet but kured's is written"},
		{verb: "patch", group: "apps", resource: "daemonsets", namespace: "kube-system", name: "kured", why: "kured's lock is written by update, as kured writes it"},
		{verb: "delete", group: "apps", resource: "daemonsets", namespace: "kube-system", name: "kured", why: "kured's DaemonSet is never deleted"},
		{verb: "watch", group: "apps", resource: "daemonsets", why: "no watch of every DaemonSet"},
		{verb: "update", group: "upgrade.cattle.io", resource: "plans", namespace: upgradeNamespace, name: "server", why: "a Plan is read, never changed"},
	} {
		assert.False(t, review(t, kube.Client, controllerAccount, r), "refused: %s %s/%s %s/%s: %s", r.verb, r.group, r.resource, r.namespace, r.name, r.why)
	}
}
