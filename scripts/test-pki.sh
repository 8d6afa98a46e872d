#!/usr/bin/env bash
# A test PKI as docs/TLS.md issues it, all P-256, for the tests and
# benchmarks outside C++ (image-test.sh, the Python and Node tests,
# bench/run.py); the C++ tests make theirs in process (tests/support/test_pki.h).
#   test-pki.sh DIR ca [COMMON_NAME]          DIR/ca.pem, DIR/ca.key
#   test-pki.sh DIR leaf NAME SANS [USAGES]   DIR/NAME.pem, DIR/NAME.key,
#       signed by DIR/ca.*; SANS like "DNS:x,IP:127.0.0.1"; USAGES an
#       extendedKeyUsage list like "serverAuth,clientAuth" (none given: any).
# Keys are mode 600. With CFDB_TEST_KEY_LOG set, the first base64 line of
# each key is appended to that file (tests/support/tmp_audit.sh). openssl's
# own output goes to DIR/openssl.log (its tail to stderr if it fails). Exits 2 on bad usage, 1 if openssl fails.
set -euo pipefail
usage() {
  echo "usage: $0 DIR ca [COMMON_NAME] | DIR leaf NAME SANS [USAGES]" >&2
  exit 2
}
[ $# -ge 2 ] || usage
# The key log is named before the cd, so a relative path means the caller's.
if [ -n "${CFDB_TEST_KEY_LOG:-}" ]; then
  CFDB_TEST_KEY_LOG=$(realpath -m "$CFDB_TEST_KEY_LOG")
fi
cd "$1"
# A failed openssl says why on stderr, not only in openssl.log.
trap 'tail -n 5 openssl.log >&2' ERR
newkey=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes)
keep() {
  chmod 600 "$1"
  [ -z "${CFDB_TEST_KEY_LOG:-}" ] || sed -n 2p "$1" >>"$CFDB_TEST_KEY_LOG"
}
case $2 in
  ca)
    openssl req -x509 "${newkey[@]}" -days 2 -subj "/CN=${3:-cfdb test CA}" \
      -keyout ca.key -out ca.pem >>openssl.log 2>&1
    keep ca.key ;;
  leaf)
    [ $# -ge 4 ] || usage
    name=$3
    {
      echo "subjectAltName=$4"
      echo "basicConstraints=CA:FALSE"
      [ -z "${5:-}" ] || echo "extendedKeyUsage=$5"
    } >"$name.ext"
    openssl req "${newkey[@]}" -subj "/CN=$name" -keyout "$name.key" \
      -out "$name.csr" >>openssl.log 2>&1
    openssl x509 -req -in "$name.csr" -CA ca.pem -CAkey ca.key \
      -CAcreateserial -days 1 -extfile "$name.ext" -out "$name.pem" \
      >>openssl.log 2>&1
    keep "$name.key" ;;
  *) usage ;;
esac
