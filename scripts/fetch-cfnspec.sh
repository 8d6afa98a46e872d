#!/usr/bin/env bash
# Installs AWS's CloudFormation resource specification (the npm package
# @aws-cdk/cfnspec, pinned) under build/cfnspec for the template tests.
# Does nothing when the pinned version is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
version=2.72.1
prefix=${CFNSPEC_PREFIX:-build/cfnspec}
manifest=$prefix/node_modules/@aws-cdk/cfnspec/package.json
if [ -f "$manifest" ] && grep -q "\"version\": \"$version\"" "$manifest"; then
  exit 0
fi
echo "installing @aws-cdk/cfnspec@$version into $prefix"
mkdir -p "$prefix"
npm install --no-audit --no-fund --silent --prefix "$prefix" \
  "@aws-cdk/cfnspec@$version"
