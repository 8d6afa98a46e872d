#!/usr/bin/env bash
# Installs the Debian packages the build needs, if any is missing.
# CFDB_DEPS=build: only what building the daemon takes (the image's build
# stage, a build without tests); otherwise (all) the tests', benchmarks' and
# checks' packages too.
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libssl-dev libspdlog-dev libcli11-dev nlohmann-json3-dev
  libcap-dev libcurl4-openssl-dev prometheus-cpp-dev libcivetweb-dev
)
if [ "${CFDB_DEPS:-all}" != build ]; then
  packages+=(
    libgtest-dev libgmock-dev libyaml-cpp-dev libbenchmark-dev python3
    clang libclang-rt-14-dev clang-format clang-tidy-22 faketime python3-h2
    python3-grpcio python3-grpc-tools python3-setuptools openssl
    python3-jsonschema python3-yaml
    # The DNS server of reap --addresses-from dns: tests.
    python3-dnslib
    # A seccomp filter that refuses clone3, for the vfork fallback's tests.
    python3-seccomp
    # promtool checks the /metrics output and the shipped alert rules.
    prometheus
    # The Python client's wheel, built and installed in a venv, and its
    # typing check (clients/python/tests/test_packaging.py, python_mypy).
    python3-venv python3-pip python3-wheel mypy
  )
fi
missing=()
for p in "${packages[@]}"; do
  [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" == *"install ok installed"* ]] \
    || missing+=("$p")
done
# npm fetches the CloudFormation spec for the template tests (CFDB_NPM=OFF
# when building without tests). Debian's npm only when none is on PATH, since
# e.g. NodeSource's nodejs bundles its own.
[ "${CFDB_NPM:-ON}" = OFF ] || command -v npm >/dev/null || missing+=(npm)
# The Kubernetes manifests' tests render with kubectl 1.27+ (kustomize v5),
# which Debian does not have (its kubernetes-client is 1.20): said, not
# installed.
if [ "${CFDB_DEPS:-all}" != build ]; then
  minor=$(kubectl version --client -o json 2>/dev/null |
    sed -n 's/.*"minor": *"\([0-9]*\).*/\1/p' | head -1 || true)
  [ "${minor:-0}" -ge 27 ] 2>/dev/null || echo "install-deps: no kubectl 1.27+" \
    "on PATH: kubernetes_manifests and image-test's kube check will fail" \
    "(https://kubernetes.io/docs/tasks/tools/)" >&2
fi
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing: ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update -qq
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
