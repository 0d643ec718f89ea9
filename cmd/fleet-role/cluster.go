package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	typedcoordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	typeddiscoveryv1 "k8s.io/client-go/kubernetes/typed/discovery/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/homedir"

	"github.com/fleet-role/fleet-role/api/logkey"
	"github.com/fleet-role/fleet-role/daemon/apiservers"
)

// k3sKubeconfig is the administrator's kubeconfig k3s writes on a server
// (mode 0600 unless its write-kubeconfig-mode says otherwise). A variable
// so that tests can put it elsewhere.
var k3sKubeconfig = "/etc/rancher/k3s/k3s.yaml"

// errNoCluster is what findCluster returns when no place it looks holds a
// cluster; its message names each place and why it did not.
var errNoCluster = errors.New("no cluster to reach")

// findCluster finds the cluster as kubectl does: the --kubeconfig file,
// else the files of the KUBECONFIG list, else ~/.kube/config (client-go's
// loading rules, merged as kubectl merges them); then k3s's own
// kubeconfig where this user can read it; then the in-cluster
// configuration of a Pod (the controller's). A place that is absent (not
// set, no such file, nothing in it, not readable for k3s's) is passed by;
// one that is there but broken is an error, as it is to kubectl, so a
// typo never reaches another cluster; an explicit --kubeconfig is the
// only place looked at. A context given (--context) is used in place of
// the current one, and must be in the kubeconfig found: with none, no
// in-cluster configuration stands in for it.
func findCluster(explicit, context string) (*rest.Config, error) {
	var tried []string
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = explicit
	rules.WarnIfAllMissing = false // said in errNoCluster's message instead
	var place string
	switch list := os.Getenv(clientcmd.RecommendedConfigPathEnvVar); {
	case explicit != "":
		place = "--kubeconfig " + explicit
	case list != "":
		place = clientcmd.RecommendedConfigPathEnvVar + "=" + list
	default:
		tried = append(tried, "--kubeconfig: not given", clientcmd.RecommendedConfigPathEnvVar+": not set")
		// Note: client-go fixes RecommendedHomeFile once, when it is
		// loaded; this reads the home directory when the command runs.
		home := filepath.Join(homedir.HomeDir(), clientcmd.RecommendedHomeDir, clientcmd.RecommendedFileName)
		rules.Precedence = []string{home}
		place = home
	}
	rc, absent, err := fromFiles(rules, context)
	switch {
	case err != nil:
		return nil, usageError{fmt.Errorf("%s: %w", place, err)}
	case absent == "":
		return rc, nil
	case explicit != "":
		return nil, usageError{fmt.Errorf("%s: %s", place, absent)}
	}
	tried = append(tried, place+": "+absent)

	k3s := &clientcmd.ClientConfigLoadingRules{ExplicitPath: k3sKubeconfig}
	f, err := os.Open(k3sKubeconfig)
	if err == nil {
		f.Close()
		rc, absent, err = fromFiles(k3s, context)
		switch {
		case err != nil:
			return nil, usageError{fmt.Errorf("%s: %w", k3sKubeconfig, err)}
		case absent == "":
			return rc, nil
		}
		tried = append(tried, k3sKubeconfig+": "+absent)
	} else {
		tried = append(tried, k3sKubeconfig+": "+whyNot(err))
	}

	if context != "" {
		return nil, usageError{fmt.Errorf("--context %s: no kubeconfig found to hold it; tried %s", context, strings.Join(tried, "; "))}
	}
	rc, err = rest.InClusterConfig()
	switch {
	case err == nil:
		return rc, nil
	case errors.Is(err, rest.ErrNotInCluster):
		tried = append(tried, "in-cluster: not in a Pod (KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set)")
	default:
		tried = append(tried, "in-cluster: "+err.Error())
	}
	return nil, fmt.Errorf("%w; tried %s", errNoCluster, strings.Join(tried, "; "))
}

// fromFiles loads the files of rules, in the context named ("" for the
// current one). absent says why they hold no configuration at all; err is
// for one that is there but broken, or without the context named.
func fromFiles(rules *clientcmd.ClientConfigLoadingRules, context string) (rc *rest.Config, absent string, err error) {
	for _, f := range append([]string{rules.ExplicitPath}, rules.Precedence...) {
		if err := checkKubeconfig(f); err != nil {
			return nil, "", err
		}
	}
	raw, err := rules.Load()
	if err != nil {
		return nil, "", err
	}
	if clientcmdapi.IsConfigEmpty(raw) {
		files := rules.Precedence
		if rules.ExplicitPath != "" {
			files = []string{rules.ExplicitPath}
		}
		for _, f := range files {
			if _, err := os.Stat(f); err == nil {
				return nil, "no configuration in it", nil
			}
		}
		if len(files) > 1 {
			return nil, "none of its files exists", nil
		}
		return nil, "no such file", nil
	}
	if _, ok := raw.Contexts[context]; context != "" && !ok {
		return nil, "", fmt.Errorf("no context %q in it; it has %s", context, strings.Join(slices.Sorted(maps.Keys(raw.Contexts)), ", "))
	}
	rc, err = clientcmd.NewDefaultClientConfig(*raw, &clientcmd.ConfigOverrides{CurrentContext: context}).ClientConfig()
	if clientcmd.IsEmptyConfig(err) {
		return nil, "", errors.New("no current context, or its cluster has no server")
	}
	return rc, "", err
}

// maxKubeconfig is the most a kubeconfig may hold. One with a cluster's
// certificates in it is some 10 KiB, a merged one of many clusters some
// hundreds; client-go reads it whole, so a file far larger (a wrong path)
// is refused before it is read.
const maxKubeconfig = 4 << 20

// checkKubeconfig refuses a kubeconfig that client-go could only read to
// fail, or read whole at a great cost: a directory, a file over
// maxKubeconfig. One that is not there is left to client-go.
func checkKubeconfig(path string) error {
	if path == "" {
		return nil
	}
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return nil
	case fi.IsDir():
		return fmt.Errorf("%s is a directory", path)
	case fi.Mode().IsRegular() && fi.Size() > maxKubeconfig:
		return fmt.Errorf("%s: %d bytes, larger than the %d bytes (4 MiB) a kubeconfig may be", path, fi.Size(), maxKubeconfig)
	}
	return nil
}

// whyNot says briefly why a file could not be opened.
func whyNot(err error) string {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "no such file"
	case errors.Is(err, fs.ErrPermission):
		return "not readable by this user"
	}
	return err.Error()
}

// kubeconfigContexts are the contexts of the kubeconfig findCluster
// would read, for completion; none where it finds none.
func kubeconfigContexts(explicit string) []string {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = explicit
	raw, err := rules.Load()
	if err != nil || clientcmdapi.IsConfigEmpty(raw) {
		raw, err = (&clientcmd.ClientConfigLoadingRules{ExplicitPath: k3sKubeconfig}).Load()
		if err != nil {
			return nil
		}
	}
	return slices.Sorted(maps.Keys(raw.Contexts))
}

// newKubeClient is the one client-go client of a command.
func newKubeClient(rc *rest.Config) (kubernetes.Interface, error) {
	return kubernetes.NewForConfig(withOurDefaults(rc))
}

// withOurDefaults sets what every client of fleet-role's sends and may
// send: its user agent and its rate.
func withOurDefaults(rc *rest.Config) *rest.Config {
	rc.UserAgent = "fleet-role/" + build().Version
	// Note: client-go's default of 5 requests a second would make a pass
	// that renews the Lease, acts and publishes its status wait on itself.
	rc.QPS, rc.Burst = 50, 100
	return rc
}

// followServers makes rc reach the API through the servers
// (daemon/apiservers): their dialer, what leaves a server that fails its
// requests, every request bounded. follow checks every server's /readyz
// and keeps their list from the `kubernetes` EndpointSlice, until its
// context ends, and leaves the apiserver of the voter a swap takes out,
// as the regrade Lease in the controller's namespace names it, address
// giving a Node's apiserver address.
func followServers(rc *rest.Config, servers *apiservers.Servers, namespace string, address func(node string) string) (follow func(context.Context), err error) {
	check, err := apiservers.ReadyzCheck(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	servers.Configure(rc)
	disc, err := typeddiscoveryv1.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	coord, err := typedcoordinationv1.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return func(ctx context.Context) {
		go servers.Run(ctx, check)
		go servers.FollowSwaps(ctx, coord, namespace, address)
		servers.Watch(ctx, disc)
	}, nil
}

// controllerServers are the apiservers the controller reaches the API
// through: the one its configuration names (in a Pod, the `kubernetes`
// Service's ClusterIP), kept as the last fallback, and those the
// `kubernetes` EndpointSlice lists, each checked: a slow or lost
// apiserver is left within a health check, rather than holding the
// controller's one connection through the ClusterIP (kube-proxy keeps a
// connection on the endpoint it chose).
func controllerServers(rc *rest.Config, log *slog.Logger) (*apiservers.Servers, error) {
	first, err := serverAddress(rc)
	if err != nil {
		return nil, err
	}
	return apiservers.New("", []string{first}, nil, log.With(logkey.Component, "controller", logkey.Part, "apiservers")), nil
}

// serverAddress is the host:port of the server rc names.
func serverAddress(rc *rest.Config) (string, error) {
	u, err := url.Parse(rc.Host)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("kubernetes client: the server %q is no URL", rc.Host)
	}
	port := u.Port()
	if port == "" {
		port = "443"
	}
	return net.JoinHostPort(u.Hostname(), port), nil
}

// nodeAddresses gives a Node's apiserver address, its InternalIP at
// k3s's port, as every k3s server advertises itself in the kubernetes
// EndpointSlice by its node IP; each Node read once, when a swap first
// names it. The controller's client is set before its first use.
type nodeAddresses struct {
	client kubernetes.Interface
	mu     sync.Mutex
	known  map[string]string
}

// address is node's apiserver address, "" when its Node cannot be read
// (asked again next time) or has no InternalIP.
func (n *nodeAddresses) address(node string) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if a, ok := n.known[node]; ok {
		return a
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := n.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	for _, a := range got.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			n.known[node] = net.JoinHostPort(a.Address, "6443")
			return n.known[node]
		}
	}
	return ""
}
