package main

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/crypto/scrypt"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// errPasswordRejected is k3s's words for a node password the servers do
// not accept (pkg/agent/config/config.go, getNodeNamedCrt).
//
//lint:ignore ST1005 k3s's own words
var errPasswordRejected = errors.New("Node password rejected, duplicate hostname or contents of '/etc/rancher/node/password' may not match server node-passwd entry, try enabling a unique node name with the --with-node-id flag")

// nodePassword reads the node password file, creating it (32 hex digits,
// 0600) on the first start. k3s: pkg/agent/config/config.go,
// ensureNodePassword. Note: on the simulated native hosts the server
// runs under a uid of its own and the agent as root, so a new file is
// given to the owner of its directory, which the test prepares.
func nodePassword(file string) (string, error) {
	if data, err := os.ReadFile(file); err == nil {
		return strings.TrimSpace(string(data)), nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("read node password: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return "", fmt.Errorf("create node password dir: %w", err)
	}
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	pass := hex.EncodeToString(b)
	if err := os.WriteFile(file, []byte(pass+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write node password: %w", err)
	}
	if st, err := os.Stat(filepath.Dir(file)); err == nil && os.Geteuid() == 0 {
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			_ = os.Chown(file, int(sys.Uid), int(sys.Gid))
		}
	}
	return pass, nil
}

// secretName is the Secret that holds a node's password hash. k3s:
// pkg/nodepassword, getSecretName.
func secretName(node string) string { return strings.ToLower(node + ".node-password.k3s") }

// hashPassword is a salted scrypt hash, "<salt hex>:<key hex>".
func hashPassword(pass string) (string, error) {
	salt := make([]byte, 8)
	_, _ = rand.Read(salt)
	key, err := scrypt.Key([]byte(pass), salt, 1<<15, 8, 1, 32)
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(salt) + ":" + hex.EncodeToString(key), nil
}

func verifyPassword(hash, pass string) bool {
	saltHex, keyHex, ok := strings.Cut(hash, ":")
	salt, err1 := hex.DecodeString(saltHex)
	want, err2 := hex.DecodeString(keyHex)
	if !ok || err1 != nil || err2 != nil {
		return false
	}
	got, err := scrypt.Key([]byte(pass), salt, 1<<15, 8, 1, 32)
	return err == nil && subtle.ConstantTimeCompare(got, want) == 1
}

// ensureNodePassword checks this node's password against the Secret the
// servers keep, creating the Secret (and kube-system) when there is none.
// k3s: pkg/nodepassword (nodepassword.go), Ensure.
func ensureNodePassword(ctx context.Context, c kubernetes.Interface, o options) error {
	pass, err := nodePassword(o.passwordFile)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	secrets := c.CoreV1().Secrets(metav1.NamespaceSystem)
	verify := func(s *corev1.Secret) error {
		if !verifyPassword(string(s.Data["hash"]), pass) {
			return errPasswordRejected
		}
		return nil
	}
	s, err := secrets.Get(ctx, secretName(o.nodeName), metav1.GetOptions{})
	if err == nil {
		return verify(s)
	}
	if !apierrors.IsNotFound(err) {
		return fmt.Errorf("read node password secret: %w", err)
	}
	hash, err := hashPassword(pass)
	if err != nil {
		return err
	}
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: metav1.NamespaceSystem}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create kube-system: %w", err)
	}
	immutable := true
	_, err = secrets.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: secretName(o.nodeName), Namespace: metav1.NamespaceSystem},
		Immutable:  &immutable,
		Data:       map[string][]byte{"hash": []byte(hash)},
	}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		if s, err := secrets.Get(ctx, secretName(o.nodeName), metav1.GetOptions{}); err == nil {
			return verify(s)
		}
	}
	if err != nil {
		return fmt.Errorf("create node password secret: %w", err)
	}
	return nil
}

// agentConfig is an agent's retrieval of its configuration from the
// server it names: the server answers, knows the agent's token, and the
// node password is accepted. k3s: pkg/agent/config/config.go, get.
func agentConfig(ctx context.Context, o options, cfg config, kube kubernetes.Interface) error {
	address := addressOf(cfg.Server)
	if address == "" {
		return fmt.Errorf("invalid server url: %s", cfg.Server)
	}
	if err := tokenKnownBy(ctx, address, cfg.Token); err != nil {
		if errors.Is(err, errTokenUnknown) {
			return fmt.Errorf("failed to retrieve configuration from server: https://%s:6443/v1-k3s/config: 401 Unauthorized", address)
		}
		return err
	}
	return ensureNodePassword(ctx, kube, o)
}

var (
	// errTokenUnknown: the server holds another token's key.
	errTokenUnknown = errors.New("token unknown to the server")
	// errNoBootstrap: the server holds no token's key yet.
	errNoBootstrap = errors.New("the server holds no bootstrap data yet")
)

// tokenKnownBy asks the server at address whether the token's key is
// in its etcd (a serializable read: the server's own copy). An error that
// is neither sentinel is the server not answering, wrapped as k3s words
// it ("failed to get CA certs").
func tokenKnownBy(ctx context.Context, address, token string) error {
	key, err := bootstrapKey(token)
	if err != nil {
		return err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{clientURL(address)}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return caCertsError(address, err)
	}
	defer cli.Close()
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if _, err := cli.Status(cctx, clientURL(address)); err != nil {
		return caCertsError(address, err)
	}
	resp, err := cli.Get(cctx, "/bootstrap/", clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithSerializable())
	if err != nil {
		return caCertsError(address, err)
	}
	if len(resp.Kvs) == 0 {
		return errNoBootstrap
	}
	for _, kv := range resp.Kvs {
		if string(kv.Key) == key {
			return nil
		}
	}
	return errTokenUnknown
}

func caCertsError(address string, err error) error {
	return fmt.Errorf("failed to get CA certs: Get \"https://%s:6443/cacerts\": %w", address, err)
}

// notifyReady tells systemd the unit is up (Type=notify), as k3s does
// once it is ready; outside a unit it does nothing.
func notifyReady(log *slog.Logger) {
	if _, err := sddaemon.SdNotify(false, sddaemon.SdNotifyReady); err != nil {
		log.Warn("READY=1 not sent", "err", err)
	}
}
