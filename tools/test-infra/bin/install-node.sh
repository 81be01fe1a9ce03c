#!/usr/bin/env bash
# Node from the npm registry, for machines that reach package registries and
# nothing else (the CI): the registry's `node-linux-<arch>` package carries
# the official binary and its headers (include/node), so native modules are
# built against it with no download (npm_config_nodedir). Kept per version
# (a second run costs nothing) in OZ0_NODE_CACHE, else /var/cache/oz0/node as
# root, else ~/.cache/oz0/node. Not under root's home: sessions under uids of
# their own run this node, and /root lets no other user through.
# Prints the folder holding bin/node and include/node.
#
#   dir="$(bash tools/test-infra/bin/install-node.sh 24.22.3)"
#   PATH="$dir/bin:$PATH" npm_config_nodedir="$dir" npm ci
set -euo pipefail
version="${1:?usage: install-node.sh VERSION (for example 24.22.3)}"
case "$(uname -m)" in
  x86_64) arch=x64 ;;
  aarch64 | arm64) arch=arm64 ;;
  *) echo "install-node.sh: the npm registry has no node-linux package for $(uname -m); install Node $version another way" >&2; exit 1 ;;
esac
if [ -n "${OZ0_NODE_CACHE:-}" ]; then
  cache="$OZ0_NODE_CACHE"
elif [ "$(id -u)" = 0 ]; then
  cache=/var/cache/oz0/node
else
  cache="${XDG_CACHE_HOME:-$HOME/.cache}/oz0/node"
fi
dir="$cache/$version"
pkg="$dir/node_modules/node-linux-$arch"
if ! [ "$("$pkg/bin/node" --version 2>/dev/null)" = "v$version" ]; then
  echo "installing Node $version (node-linux-$arch) from the npm registry into $dir" >&2
  mkdir -p "$cache"
  # Into a folder of its own first, so an interrupted download never passes for a cached one.
  partial="$(mktemp -d "$cache/.partial-$version-XXXXXX")"
  trap 'rm -rf "$partial"' EXIT
  npm install --prefix "$partial" --no-save --no-package-lock --no-audit --no-fund --ignore-scripts "node-linux-$arch@$version" >&2
  [ "$("$partial/node_modules/node-linux-$arch/bin/node" --version)" = "v$version" ]
  [ -f "$partial/node_modules/node-linux-$arch/include/node/node.h" ] || { echo "install-node.sh: node-linux-$arch@$version has no headers (include/node)" >&2; exit 1; }
  chmod 755 "$partial" # mktemp's 0700 would keep other users from this node
  rm -rf "$dir"
  mv "$partial" "$dir"
fi
echo "$pkg"
