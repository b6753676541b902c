#!/usr/bin/env bash
# Print the path of a helm binary of HELM_VERSION, building it once from the Go module proxy.
#
# No download site is reachable from CI, but the Go module proxy is: `go install` compiles helm
# from its module (about 5 minutes cold on 2 cores). The binary is cached under
# ~/.cache/fairstream/tools/helm-<version>/helm (FAIRSTREAM_CACHE_DIR overrides the root), so
# later runs reuse it. A helm of the same version already on PATH is used as is.
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.22.0}"
cache_root="${FAIRSTREAM_CACHE_DIR:-$HOME/.cache/fairstream}"
tool_dir="$cache_root/tools/helm-$HELM_VERSION"
helm_bin="$tool_dir/helm"

if command -v helm >/dev/null 2>&1 && helm version --template '{{.Version}}' 2>/dev/null | grep -qx "$HELM_VERSION"; then
    command -v helm
    exit 0
fi

if [ ! -x "$helm_bin" ]; then
    command -v go >/dev/null 2>&1 || { echo "ensure-helm: go is needed to build helm $HELM_VERSION" >&2; exit 1; }
    echo "ensure-helm: building helm $HELM_VERSION from the Go module proxy into $tool_dir (once)" >&2
    mkdir -p "$tool_dir"
    start=$(date +%s)
    # Build into a temporary dir and move into place, so an interrupted build never leaves a
    # half-written binary that a later run would trust.
    tmp_bin=$(mktemp -d "$tool_dir/.build.XXXXXX")
    trap 'rm -rf "$tmp_bin"' EXIT
    GOBIN="$tmp_bin" GOFLAGS="${GOFLAGS:-} -mod=mod" CGO_ENABLED=0 \
        go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >&2
    mv "$tmp_bin/helm" "$helm_bin"
    echo "ensure-helm: built in $(( $(date +%s) - start ))s" >&2
fi
echo "$helm_bin"
