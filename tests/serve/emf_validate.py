"""Validates EMF lines (one JSON object a line on stdin) against the
published schema (argv[1]) and the rule the schema cannot state: every
declared metric and dimension is a member of the root. Prints "ok N" or the
first error, and exits 0 or 1."""
import json
import sys

import jsonschema

schema = json.load(open(sys.argv[1]))
count = 0
for line in sys.stdin:
    if '"_aws"' not in line:
        continue
    document = json.loads(line)
    try:
        jsonschema.validate(document, schema)
        for directive in document["_aws"]["CloudWatchMetrics"]:
            for name in [m["Name"] for m in directive["Metrics"]] + [
                    d for dims in directive["Dimensions"] for d in dims]:
                if name not in document:
                    raise ValueError(f"{name} is declared but not a member")
    except (jsonschema.ValidationError, ValueError) as e:
        print(f"invalid: {e}\n{line}")
        sys.exit(1)
    count += 1
print(f"ok {count}")
sys.exit(0 if count else 1)
