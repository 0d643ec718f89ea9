package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/utils/clock"

	"github.com/fleet-role/fleet-role/api/logkey"
	"github.com/fleet-role/fleet-role/platform"
)

// tokenCheckEvery is how often the token file is read again. Note:
// client-go reads a kubeconfig's tokenFile again as often (its cached
// file token source keeps what it read for a minute), so a renewed token
// is the one sent within about a minute, long before the old one expires.
const tokenCheckEvery = time.Minute

// minTokenLifetime is the shortest lifetime the API server grants a
// TokenRequest (expirationSeconds of at least 600).
const minTokenLifetime = 10 * time.Minute

// tokenRequestTimeout bounds one TokenRequest.
const tokenRequestTimeout = 30 * time.Second

// tokenRenewer keeps the agent's ServiceAccount token fresh: once half of
// the token's lifetime has passed, it asks the API server, authenticated
// by that token, for a new one of the same ServiceAccount, lifetime and
// audiences (a TokenRequest, which the agent's RBAC allows for its own
// ServiceAccount only), and rewrites the token file atomically. The
// kubeconfig reads the token from that file, so no restart is needed.
//
// An agent that was stopped for longer than the token's lifetime cannot
// renew it (an expired token authenticates nothing): the Ansible role
// mints a new one when run, as it does for a missing or refused token.
type tokenRenewer struct {
	path   string
	client typedcorev1.CoreV1Interface
	clock  clock.WithTicker
	log    *slog.Logger
	// told is the last problem logged, so that a lasting one is logged once.
	told string
}

func newTokenRenewer(path string, client typedcorev1.CoreV1Interface, clk clock.WithTicker, log *slog.Logger) *tokenRenewer {
	return &tokenRenewer{path: path, client: client, clock: clk, log: log}
}

// saToken is what the agent reads of its token: whose it is, for which
// audiences, and its lifetime. The signature is the API server's to
// check, not the agent's.
type saToken struct {
	namespace, name string
	audiences       []string
	issued, expires time.Time
	id              string
}

// renewAt is when the token is renewed: half its lifetime in, leaving the
// other half for the API server to be reached.
func (t saToken) renewAt() time.Time { return t.issued.Add(t.expires.Sub(t.issued) / 2) }

// tokenClaims are the claims of a Kubernetes ServiceAccount token.
type tokenClaims struct {
	jwt.RegisteredClaims
	Kubernetes struct {
		Namespace      string `json:"namespace"`
		ServiceAccount struct {
			Name string `json:"name"`
			UID  string `json:"uid"`
		} `json:"serviceaccount"`
	} `json:"kubernetes.io"`
}

// errNotAServiceAccountToken marks a token file whose content is no
// ServiceAccount token this agent can renew.
var errNotAServiceAccountToken = errors.New("not a ServiceAccount token")

// parseToken reads a ServiceAccount token's claims without checking its
// signature.
func parseToken(raw string) (saToken, error) {
	var c tokenClaims
	if _, _, err := jwt.NewParser().ParseUnverified(raw, &c); err != nil {
		return saToken{}, fmt.Errorf("%w: %w", errNotAServiceAccountToken, err)
	}
	k := c.Kubernetes
	switch {
	case k.Namespace == "" || k.ServiceAccount.Name == "":
		return saToken{}, fmt.Errorf("%w: no kubernetes.io namespace and serviceaccount claims", errNotAServiceAccountToken)
	case c.IssuedAt == nil || c.ExpiresAt == nil:
		return saToken{}, fmt.Errorf("%w: no iat or exp claim", errNotAServiceAccountToken)
	case !c.ExpiresAt.After(c.IssuedAt.Time):
		return saToken{}, fmt.Errorf("%w: exp is not after iat", errNotAServiceAccountToken)
	}
	return saToken{
		namespace: k.Namespace,
		name:      k.ServiceAccount.Name,
		audiences: c.Audience,
		issued:    c.IssuedAt.Time,
		expires:   c.ExpiresAt.Time,
		id:        c.ID,
	}, nil
}

// run checks the token now and every tokenCheckEvery until ctx ends.
func (r *tokenRenewer) run(ctx context.Context) {
	t := r.clock.NewTicker(tokenCheckEvery)
	defer t.Stop()
	for {
		if _, err := r.check(ctx); err != nil && ctx.Err() == nil {
			r.problem(err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

// problem logs an error once for as long as it lasts.
func (r *tokenRenewer) problem(err error) {
	if msg := err.Error(); msg != r.told {
		r.told = msg
		r.log.Warn("token not renewed; trying again", logkey.File, r.path, logkey.RetryIn, tokenCheckEvery, logkey.Err, err)
	}
}

// check renews the token if it is due, and says whether it did.
func (r *tokenRenewer) check(ctx context.Context) (bool, error) {
	b, err := os.ReadFile(r.path)
	if err != nil {
		return false, fmt.Errorf("read the token: %w", err)
	}
	old, err := parseToken(strings.TrimSpace(string(b)))
	if err != nil {
		return false, fmt.Errorf("token file %s: %w", r.path, err)
	}
	now := r.clock.Now()
	if now.Before(old.renewAt()) {
		r.told = ""
		return false, nil
	}
	next, err := r.renew(ctx, old)
	if err != nil {
		if !now.Before(old.expires) {
			return false, fmt.Errorf("the token expired at %s and authenticates nothing: run the Ansible role for this host to mint a new one: %w",
				old.expires.UTC().Format(time.RFC3339), err)
		}
		return false, err
	}
	r.told = ""
	r.log.Info("token renewed", logkey.File, r.path, logkey.ServiceAccount, old.namespace+"/"+old.name,
		logkey.Expires, next.expires.UTC().Format(time.RFC3339), logkey.RenewAt, next.renewAt().UTC().Format(time.RFC3339))
	return true, nil
}

// renew asks for a token like the old one and writes it.
func (r *tokenRenewer) renew(ctx context.Context, old saToken) (saToken, error) {
	lifetime := max(old.expires.Sub(old.issued).Round(time.Second), minTokenLifetime)
	secs := int64(lifetime / time.Second)
	ctx, cancel := context.WithTimeout(ctx, tokenRequestTimeout)
	defer cancel()
	tr, err := r.client.ServiceAccounts(old.namespace).CreateToken(ctx, old.name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: old.audiences, ExpirationSeconds: &secs},
	}, metav1.CreateOptions{})
	if err != nil {
		return saToken{}, fmt.Errorf("request a token for %s/%s: %w", old.namespace, old.name, err)
	}
	raw := tr.Status.Token
	next, err := parseToken(raw)
	if err != nil {
		return saToken{}, fmt.Errorf("the token the API server gave: %w", err)
	}
	if next.namespace != old.namespace || next.name != old.name {
		return saToken{}, fmt.Errorf("the API server gave a token of %s/%s for %s/%s", next.namespace, next.name, old.namespace, old.name)
	}
	if err := platform.WriteFileAtomic(r.path, []byte(raw), 0o600); err != nil {
		return saToken{}, fmt.Errorf("write the token: %w", err)
	}
	return next, nil
}
