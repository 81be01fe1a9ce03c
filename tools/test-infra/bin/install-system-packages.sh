#!/usr/bin/env bash
# Debian packages the tests use: bubblewrap (session isolation), PostgreSQL
# (the store at scale), git (plugin installs from repositories), setpriv
# (util-linux: harnesses and embedded services die with their parent),
# chromium (the console's browser tests drive it with playwright-core),
# python3-seccomp (libseccomp: the sandbox's test writes the sessions' seccomp
# filter again and compares it with the programs checked in), openssl (the
# Kafka launcher's TLS listener: a CA and a certificate for each such broker).
# Java 17 and Maven come with the machine; Kafka's jars are fetched by the
# Kafka launcher through Maven and cached.
set -euo pipefail
need=()
command -v bwrap >/dev/null || need+=(bubblewrap)
command -v git >/dev/null || need+=(git)
command -v setpriv >/dev/null || need+=(util-linux)
command -v chromium >/dev/null || need+=(chromium)
command -v openssl >/dev/null || need+=(openssl)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
/usr/bin/python3 -c "import seccomp" >/dev/null 2>&1 || need+=(python3-seccomp)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "installing the Debian packages the tests need: ${need[*]}" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "the tests need Debian packages that are missing: ${need[*]}; install them with: sudo bash tools/test-infra/bin/install-system-packages.sh (or sudo apt-get install ${need[*]})" >&2
    exit 1
  fi
fi
