#!/bin/sh
# tmp_audit.sh before|after STATE KEYS: a test run leaves nothing of its own
# in /tmp. Two kinds are checked:
# - a copy of a worker's key in /tmp/cfdb-worker-tls-* (where credential
#   mirrors once wrote key copies that outlived a killed worker). `before`
#   empties KEYS, to which the test PKIs append the first line of each key
#   they make (CFDB_TEST_KEY_LOG: test_pki.h, the Python and Node tests);
#   `after` fails naming each new entry that holds one of this run's keys.
#   Entries with other keys are another run's on this machine (an older
#   build), and only named.
# - any other new /tmp/cfdb-* entry: a test's scratch directory (e.g. the
#   Wool stubs of test_wool_compat.py) that it did not remove.
# `before` records the entries there are. CTest runs the two around every
# other test (the tmp_audit fixture, tests/CMakeLists.txt).
set -eu
mode=$1
state=$2
keys=$3
list() { find /tmp -maxdepth 1 -name 'cfdb-*' | sort; }
case $mode in
  before)
    list > "$state"
    : > "$keys" ;;
  after)
    ours=""
    for entry in $(list | comm -13 "$state" -); do
      case $entry in
        /tmp/cfdb-worker-tls-*)
          if [ -s "$keys" ] && grep -rqsF -f "$keys" "$entry"; then
            ours="$ours $entry"
          else
            echo "new, not with this run's keys (another run's): $entry"
          fi ;;
        *) ours="$ours $entry" ;;
      esac
    done
    if [ -n "$ours" ]; then
      echo "left behind by this test run (key copies that outlived their" \
        "worker, scratch a test did not remove):"
      printf '%s\n' $ours
      exit 1
    fi
    echo "nothing left in /tmp/cfdb-*, no copy of this run's" \
      "$(wc -l < "$keys") keys" ;;
  *) echo "usage: $0 before|after STATE KEYS" >&2; exit 2 ;;
esac
