#!/usr/bin/env bash
# Encodes the text-format seeds in fuzz/seeds/*.txtpb into the binary corpus
# of dispatch_request_fuzz, with protoc.
set -euo pipefail
cd "$(dirname "$0")"
out=corpus/dispatch_request_fuzz
mkdir -p "$out"
for seed in seeds/*.txtpb; do
  protoc --proto_path=../proto --encode=cfdb.worker.v1.DispatchRequest \
    cfdb/worker/v1/worker.proto < "$seed" > "$out/$(basename "$seed" .txtpb)"
done
