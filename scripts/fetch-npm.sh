#!/usr/bin/env bash
# Installs pinned npm packages under a prefix for the tests:
#   scripts/fetch-npm.sh PREFIX NAME@VERSION...
# (the CloudFormation resource specification for the template tests, grpc-js
# and its proto loader for the interop test). Does nothing when every
# pinned version is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=$1
shift
missing=()
for package in "$@"; do
  name=${package%@*}
  version=${package##*@}
  manifest=$prefix/node_modules/$name/package.json
  if ! [ -f "$manifest" ] || ! grep -q "\"version\": \"$version\"" "$manifest"; then
    missing+=("$package")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing ${missing[*]} into $prefix"
mkdir -p "$prefix"
npm install --no-audit --no-fund --silent --prefix "$prefix" "${missing[@]}"
