#!/usr/bin/env python3
"""Checks that every test of a build directory has a time bound (ctest's
TIMEOUT property), so that a test that hangs fails naming itself instead of
holding the whole run until CI's limit. Run by ctest as `test_bounds`:

    test_bounds.py CTEST BUILD_DIR LIMIT_SECONDS

Exits 1 naming each test without a TIMEOUT, or with one above LIMIT_SECONDS
(CFDB_SUITE_TIMEOUT, the longest any test may have)."""
import json
import subprocess
import sys


def main():
    ctest, build, limit = sys.argv[1], sys.argv[2], float(sys.argv[3])
    listing = json.loads(subprocess.run(
        [ctest, "--test-dir", build, "--show-only=json-v1"],
        check=True, capture_output=True, text=True).stdout)
    bad = []
    for test in listing["tests"]:
        bound = {p["name"]: p["value"]
                 for p in test.get("properties", [])}.get("TIMEOUT")
        if bound is None or not 0 < float(bound) <= limit:
            bad.append(f"{test['name']}: TIMEOUT {bound}")
    for line in bad:
        print(line)
    print(f"{len(listing['tests'])} tests, {len(bad)} without a bound")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
