"""Reads a running server's /metrics with the Prometheus project's own parser (PyPI's
prometheus-client) and checks it: every family the server documents is there, and no request
was answered 5xx other than 503 (database or registry busy, which clients retry).

GPUNEX_BASE is the server's URL; the request comes from loopback with no credentials, as a
Prometheus on the same host would send it. Prints the figures it read.
"""

import os
import sys
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

REQUIRED = {
    "gpunex_http_requests": "counter",
    "gpunex_http_request_duration_seconds": "histogram",
    "gpunex_http_connections_open": "gauge",
    "gpunex_store_appends": "counter",
    "gpunex_store_commits": "counter",
    "gpunex_store_group_size_appends": "histogram",
    "gpunex_store_commit_duration_seconds": "histogram",
    "gpunex_projection_lag_events": "gauge",
    "gpunex_registry_lag_events": "gauge",
    "gpunex_outbox_lag_events": "gauge",
    "gpunex_payouts": "gauge",
    "gpunex_database_up": "gauge",
}

base = os.environ["GPUNEX_BASE"]
with urllib.request.urlopen(f"{base}/metrics") as response:
    content_type = response.headers["Content-Type"]
    text = response.read().decode("utf-8")
if not content_type.startswith("text/plain; version=0.0.4"):
    sys.exit(f"/metrics answered {content_type!r}")

families = {family.name: family for family in text_string_to_metric_families(text)}
missing = [
    f"{name} ({kind})"
    for name, kind in REQUIRED.items()
    if name not in families or families[name].type != kind
]
if missing:
    sys.exit(f"/metrics lacks {', '.join(missing)}")

requests = errors = unavailable = 0
routes = set()
for sample in families["gpunex_http_requests"].samples:
    count = int(sample.value)
    requests += count
    routes.add(sample.labels["route"])
    status = int(sample.labels["status"])
    if status == 503:
        unavailable += count
    elif status >= 500:
        errors += count
        print(f"5xx: {sample.labels} x{count}", file=sys.stderr)
commits = sum(s.value for s in families["gpunex_store_commits"].samples)
print(
    f"metrics: {len(families)} families; {requests} requests over {len(routes)} routes, "
    f"{unavailable} answered 503, {errors} other 5xx; {int(commits)} group commits"
)
if errors:
    sys.exit("the server answered 5xx other than 503")
