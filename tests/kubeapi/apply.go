package kubeapi

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/fleet-role/fleet-role/tests/testhost"
)

// Decode reads the objects of a multi-document manifest, strictly: an
// unknown or misspelt field is an error. An object of a kind client-go
// does not know (a CRD's: a ServiceMonitor, say) is read as Unstructured.
func Decode(manifest []byte) ([]runtime.Object, error) {
	codecs := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict)
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(manifest)))
	var objs []runtime.Object
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		if strings.TrimSpace(strings.Join(nonComments(string(doc)), "")) == "" {
			continue
		}
		obj, _, err := codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if runtime.IsNotRegisteredError(err) {
			u := &unstructured.Unstructured{}
			if err = yaml.Unmarshal(doc, &u.Object); err == nil {
				obj = u
			}
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		objs = append(objs, obj)
	}
}

func nonComments(doc string) []string {
	var out []string
	for _, l := range strings.Split(doc, "\n") {
		if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "#") {
			out = append(out, l)
		}
	}
	return out
}

// Apply creates the objects of a manifest (those already there are left).
func Apply(tb testhost.T, c kubernetes.Interface, manifest []byte) {
	tb.Helper()
	objs, err := Decode(manifest)
	if err != nil {
		tb.Fatal(err)
	}
	for _, obj := range objs {
		if err := create(context.Background(), c, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			tb.Fatalf("create %T: %v", obj, err)
		}
	}
}

func create(ctx context.Context, c kubernetes.Interface, obj runtime.Object) error {
	o := metav1.CreateOptions{}
	var err error
	switch v := obj.(type) {
	case *corev1.Namespace:
		_, err = c.CoreV1().Namespaces().Create(ctx, v, o)
	case *corev1.ServiceAccount:
		_, err = c.CoreV1().ServiceAccounts(v.Namespace).Create(ctx, v, o)
	case *corev1.ConfigMap:
		_, err = c.CoreV1().ConfigMaps(v.Namespace).Create(ctx, v, o)
	case *corev1.Service:
		_, err = c.CoreV1().Services(v.Namespace).Create(ctx, v, o)
	case *appsv1.Deployment:
		_, err = c.AppsV1().Deployments(v.Namespace).Create(ctx, v, o)
	case *policyv1.PodDisruptionBudget:
		_, err = c.PolicyV1().PodDisruptionBudgets(v.Namespace).Create(ctx, v, o)
	case *rbacv1.ClusterRole:
		_, err = c.RbacV1().ClusterRoles().Create(ctx, v, o)
	case *rbacv1.ClusterRoleBinding:
		_, err = c.RbacV1().ClusterRoleBindings().Create(ctx, v, o)
	case *rbacv1.Role:
		_, err = c.RbacV1().Roles(v.Namespace).Create(ctx, v, o)
	case *rbacv1.RoleBinding:
		_, err = c.RbacV1().RoleBindings(v.Namespace).Create(ctx, v, o)
	default:
		return fmt.Errorf("unexpected kind %T", obj)
	}
	return err
}
