package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/fleet-role/fleet-role/api"
)

// nodeClient is the agent's part of the API: a watch of its own Node (a
// field selector, so it lists and watches one object), a merge patch of
// its annotations, and Events on it.
//
// Note: it holds the core/v1 client alone, not a whole Clientset, and
// builds its one informer itself rather than through an informer factory:
// a Clientset makes a client for every API group when it is made, which
// pages in code of the binary the agent never runs (docs/figures.md).
type nodeClient struct {
	client   typedcorev1.CoreV1Interface
	name     string
	log      *slog.Logger
	informer cache.SharedIndexInformer
	recorder record.EventRecorder
	events   record.EventBroadcaster
	ref      *corev1.ObjectReference
}

func newNodeClient(client typedcorev1.CoreV1Interface, name string, log *slog.Logger) *nodeClient {
	own := func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			own(&o)
			return client.Nodes().List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			own(&o)
			return client.Nodes().Watch(ctx, o)
		},
	}
	events := record.NewBroadcaster()
	return &nodeClient{
		client:   client,
		name:     name,
		log:      log,
		informer: cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, client), &corev1.Node{}, 0, cache.Indexers{}),
		events:   events,
		recorder: events.NewRecorder(scheme.Scheme, corev1.EventSource{Component: api.EventSourceAgent, Host: name}),
		// Note: a Node's Events name it by its name as UID, as the kubelet's do.
		ref: &corev1.ObjectReference{Kind: "Node", Name: name, UID: types.UID(name)},
	}
}

// start runs the watch; onChange is called on every change of the Node.
func (n *nodeClient) start(ctx context.Context, onChange func()) error {
	_, err := n.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { onChange() },
		UpdateFunc: func(any, any) { onChange() },
		DeleteFunc: func(any) { onChange() },
	})
	if err != nil {
		return fmt.Errorf("watch node %s: %w", n.name, err)
	}
	n.events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: n.client.Events("")})
	go func() {
		<-ctx.Done()
		n.events.Shutdown()
	}()
	go n.informer.RunWithContext(ctx)
	return nil
}

// synced says the watch has listed the Node once.
func (n *nodeClient) synced() bool { return n.informer.HasSynced() }

// node is the latest version of the Node seen, nil if none.
func (n *nodeClient) node() *corev1.Node {
	obj, ok, err := n.informer.GetStore().GetByKey(n.name)
	if err != nil || !ok {
		return nil
	}
	node, _ := obj.(*corev1.Node)
	return node
}

// writeTimeout bounds one write: a server that holds it longer (its etcd
// member without quorum holds a request up to etcd's request timeout, 15 s
// on k3s, before a 500) is left for the next (daemon/apiservers), and the
// write made again.
const writeTimeout = 10 * time.Second

// annotate sets one annotation on the Node by a merge patch.
func (n *nodeClient) annotate(ctx context.Context, key, value string) error {
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{key: value}}})
	if err != nil {
		return err
	}
	if _, err := n.client.Nodes().Patch(ctx, n.name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("annotate node %s with %s: %w", n.name, key, err)
	}
	return nil
}

// event records an Event on the Node.
func (n *nodeClient) event(warning bool, reason, format string, args ...any) {
	typ := corev1.EventTypeNormal
	if warning {
		typ = corev1.EventTypeWarning
	}
	n.recorder.Eventf(n.ref, typ, reason, format, args...)
}
