#!/usr/bin/env bash
# What deploy/test needs beyond `npm ci`: something that renders kustomize
# offline. kubectl bundles kustomize and is on the polyglot machine image
# (from the Google Cloud SDK's apt repository, not Debian's: `apt-get install
# kubectl` cannot bring it back on a machine without it). Where neither
# kubectl nor kustomize runs, this installs kustomize from the Go module
# proxy into $(go env GOPATH)/bin, where deploy/test looks for it.
# Idempotent and quick when a renderer is already there. Call it from .ci/run
# after tools/test-infra/bin/install-system-packages.sh.
set -euo pipefail
KUSTOMIZE_MODULE=sigs.k8s.io/kustomize/kustomize/v5
KUSTOMIZE_VERSION=v5.5.0   # the kustomize kubectl v1.32 bundles

if kubectl version --client >/dev/null 2>&1; then exit 0; fi
if kustomize version >/dev/null 2>&1; then exit 0; fi
if ! command -v go >/dev/null 2>&1; then
  echo "deploy/ci-prerequisites.sh: neither kubectl nor kustomize runs here, and Go is missing to install kustomize ($KUSTOMIZE_MODULE@$KUSTOMIZE_VERSION)" >&2
  exit 1
fi
gobin="$(go env GOBIN)"
[ -n "$gobin" ] || gobin="$(go env GOPATH)/bin"
if "$gobin/kustomize" version >/dev/null 2>&1; then exit 0; fi
echo "deploy: installing kustomize $KUSTOMIZE_VERSION with go install" >&2
go install "$KUSTOMIZE_MODULE@$KUSTOMIZE_VERSION"
"$gobin/kustomize" version >/dev/null
