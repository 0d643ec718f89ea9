#!/usr/bin/python3
# -*- coding: utf-8 -*-
"""Mints a fleet-role agent's ServiceAccount token by TokenRequest when the
host has none the API server accepts, or its own is near expiry."""

from __future__ import annotations

import base64
import datetime
import json
import re

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

DOCUMENTATION = r"""
---
module: fleet_role_agent_token
short_description: Mint a fleet-role agent's ServiceAccount token when its own will not do
description:
  - Reviews the host's current token with the API server (a TokenReview)
    and mints a new one by a TokenRequest for the ServiceAccount when there
    is none, the API server refuses it (expired, its ServiceAccount deleted
    and made anew, the signing key changed), it is another account's, or it
    expires within I(renew_within).
  - A token still good is left alone, so that a second run changes nothing;
    the agent renews its token itself once half its lifetime has passed.
  - Returns the cluster's CA from the kubeconfig, for the agent's kubeconfig.
options:
  kubeconfig:
    description: The kubeconfig to reach the API server with; the environment's (KUBECONFIG, ~/.kube/config) when empty.
    type: path
  context:
    description: The kubeconfig's context; its current one when empty.
    type: str
  namespace:
    description: The ServiceAccount's namespace.
    type: str
    required: true
  service_account:
    description: The ServiceAccount's name.
    type: str
    required: true
  token:
    description: The host's current token; empty when it has none.
    type: str
    default: ""
  lifetime:
    description: The lifetime a new token is asked for, in seconds or as 168h, 30m, 7d (at least 10m).
    type: str
    required: true
  renew_within:
    description: A token that expires within this is replaced (seconds, or 24h...).
    type: str
    required: true
requirements: [kubernetes (python3-kubernetes)]
"""

RETURN = r"""
minted:
  description: Whether a token is minted (in check mode, would be).
  type: bool
  returned: always
token:
  description: The token minted; only when one was, never the current one.
  type: str
  returned: changed and not check mode
reason:
  description: Why a token was minted, or why the current one is kept.
  type: str
  returned: always
expires:
  description: When the token the host is left with expires (RFC 3339); empty when unknown.
  type: str
  returned: always
ca:
  description: The cluster's CA (PEM, base64) from the kubeconfig; empty when it names none.
  type: str
  returned: always
"""

try:
    import kubernetes
    from kubernetes.client.rest import ApiException

    HAS_KUBERNETES = True
except ImportError:
    HAS_KUBERNETES = False

DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def seconds(module, key):
    """A duration parameter in seconds."""
    value = str(module.params[key]).strip()
    if value.isdigit():
        return int(value)
    m = DURATION.match(value)
    if not value or not m:
        module.fail_json(msg="%s: %r is not a duration such as 168h, 30m or 600" % (key, value))
    d, h, mi, s = (int(x or 0) for x in m.groups())
    return ((d * 24 + h) * 60 + mi) * 60 + s


def claims(token):
    """The claims of a JWT, unverified (the API server verifies it); None when it is none."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        payload = parts[1] + "=" * (-len(parts[1]) % 4)
        c = json.loads(base64.urlsafe_b64decode(payload))
    except ValueError:
        return None
    return c if isinstance(c, dict) else None


def rfc3339(unix):
    return datetime.datetime.fromtimestamp(unix, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def ca_of(api_client):
    """The CA the kubeconfig names, base64 of its PEM, or ""."""
    path = api_client.configuration.ssl_ca_cert
    if not path:
        return ""
    with open(path, "rb") as f:
        return base64.b64encode(f.read()).decode()


def why_mint(module, api_client, token, user, renew_within, now):
    """Why the current token will not do, or None when it will, with its expiry."""
    if not token:
        return "the host has no token yet", None
    c = claims(token)
    if c is None or not isinstance(c.get("exp"), (int, float)):
        return "the host's token file holds no ServiceAccount token", None
    exp = int(c["exp"])
    if c.get("sub") != user:
        return "the host's token is of %s, not %s" % (c.get("sub"), user), exp
    # Note: a read of the ServiceAccount is consistent, where the API
    # server's TokenReview may still take a token of a ServiceAccount just
    # deleted and made anew for a moment.
    ns, name = user.split(":")[2:]
    try:
        sa = kubernetes.client.CoreV1Api(api_client).read_namespaced_service_account(name, ns)
    except ApiException as e:
        if e.status == 404:
            return "there is no ServiceAccount %s/%s yet" % (ns, name), exp
        module.fail_json(msg="read the ServiceAccount %s/%s: %s %s" % (ns, name, e.status, e.reason))
    claimed = ((c.get("kubernetes.io") or {}).get("serviceaccount") or {}).get("uid")
    if claimed != sa.metadata.uid:
        return "the host's token is of an earlier ServiceAccount %s/%s (uid %s), deleted since" % (ns, name, claimed), exp
    review = kubernetes.client.V1TokenReview(spec=kubernetes.client.V1TokenReviewSpec(token=token))
    try:
        status = kubernetes.client.AuthenticationV1Api(api_client).create_token_review(review).status
    except ApiException as e:
        module.fail_json(msg="review the host's token: %s %s" % (e.status, e.reason))
    if not status.authenticated:
        return "the API server refuses the host's token: %s" % (status.error or "not authenticated"), exp
    if status.user.username != user:
        return "the API server takes the host's token for %s, not %s" % (status.user.username, user), exp
    if exp - now < renew_within:
        return "the host's token expires at %s, within %ds" % (rfc3339(exp), renew_within), exp
    return None, exp


def main():
    module = AnsibleModule(
        argument_spec=dict(
            kubeconfig=dict(type="path"),
            context=dict(type="str"),
            namespace=dict(type="str", required=True),
            service_account=dict(type="str", required=True),
            token=dict(type="str", default="", no_log=True),
            lifetime=dict(type="str", required=True),
            renew_within=dict(type="str", required=True),
        ),
        supports_check_mode=True,
    )
    if not HAS_KUBERNETES:
        module.fail_json(msg=missing_required_lib("kubernetes (python3-kubernetes)"))
    lifetime = seconds(module, "lifetime")
    renew_within = seconds(module, "renew_within")
    if lifetime < 600:
        module.fail_json(msg="lifetime: the API server grants no token shorter than 10m, got %ds" % lifetime)
    if renew_within >= lifetime:
        module.fail_json(msg="renew_within (%ds) must be shorter than lifetime (%ds): every run would mint a token" % (renew_within, lifetime))

    p = module.params
    try:
        api_client = kubernetes.config.new_client_from_config(config_file=p["kubeconfig"] or None, context=p["context"] or None)
    except Exception as e:  # the loader raises several kinds, each saying what is wrong
        module.fail_json(msg="load the kubeconfig %s: %s" % (p["kubeconfig"] or "of the environment", e))
    ns, name = p["namespace"], p["service_account"]
    user = "system:serviceaccount:%s:%s" % (ns, name)
    now = int(datetime.datetime.now(datetime.timezone.utc).timestamp())
    token = (p["token"] or "").strip()
    ca = ca_of(api_client)

    reason, exp = why_mint(module, api_client, token, user, renew_within, now)
    if reason is None:
        module.exit_json(changed=False, minted=False, reason="the host's token is good until %s" % rfc3339(exp), expires=rfc3339(exp), ca=ca)
    if module.check_mode:
        module.exit_json(changed=True, minted=True, reason=reason, expires="", ca=ca)

    body = kubernetes.client.AuthenticationV1TokenRequest(
        spec=kubernetes.client.V1TokenRequestSpec(audiences=[], expiration_seconds=lifetime)
    )
    try:
        tr = kubernetes.client.CoreV1Api(api_client).create_namespaced_service_account_token(name, ns, body)
    except ApiException as e:
        module.fail_json(msg="request a token for %s/%s: %s %s" % (ns, name, e.status, e.reason))
    c = claims(tr.status.token) or {}
    module.exit_json(changed=True, minted=True, token=tr.status.token, reason=reason, expires=rfc3339(int(c.get("exp", now + lifetime))), ca=ca)


if __name__ == "__main__":
    main()
