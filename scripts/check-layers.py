#!/usr/bin/env python3
"""Checks the include graph of the project's own C++ files (`make check-layers`).

Fails, naming the files, when
- the headers include each other in a cycle;
- a file includes a project header of a higher layer (core <- exec <- rpc <-
  serve <- cli: a layer may include its own headers and those of layers below);
- a core or exec file includes a gRPC or protobuf header.
Public headers (include/cfdb/worker/) belong to the layer that implements
them, listed in PUBLIC below. Tests belong to the layer they mirror
(tests/core, tests/exec, tests/rpc, tests/serve, tests/cli); the shared fixtures of
tests/support to none.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
LAYERS = ["core", "exec", "rpc", "serve", "cli"]
PUBLIC = {
    "clock.h": "core", "shutdown.h": "core", "docket.h": "core",
    "drain.h": "core", "job.h": "core", "job_handle.h": "core", "job_journal.h": "core",
    "limits.h": "core", "worker.h": "core",
    "exec.h": "exec", "containment.h": "exec",
    "server.h": "rpc", "connection.h": "rpc", "credentials.h": "rpc",
    "errors.h": "rpc",
    "serve.h": "serve", "serve_config.h": "serve", "rpcs.h": "rpc",
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SYSTEM = re.compile(r'^\s*#\s*include\s+[<"]((grpc|grpcpp|google/protobuf)/[^>"]+)[>"]', re.M)


def layer_of(path):
    rel = path.relative_to(ROOT)
    if rel.parts[:3] == ("include", "cfdb", "worker"):
        name = rel.parts[3]
        if name not in PUBLIC:
            sys.exit(f"check-layers: {rel}: a public header without a layer "
                     f"(add it to PUBLIC in {pathlib.Path(__file__).name})")
        return PUBLIC[name]
    if rel.parts[0] in ("src", "tests") and rel.parts[1] in LAYERS:
        return rel.parts[1]
    return None


def resolve(name):
    for base in (ROOT / "include", ROOT / "src", ROOT / "tests"):
        candidate = base / name
        if candidate.exists():
            return candidate
    return None  # generated (*.pb.h) or not ours


def main():
    files = sorted(p for d in ("include", "src", "tests") for p in (ROOT / d).rglob("*")
                   if p.suffix in (".h", ".cc"))
    graph, problems = {}, []
    for path in files:
        text = path.read_text()
        layer = layer_of(path)
        graph[path] = []
        for name in INCLUDE.findall(text):
            target = resolve(name)
            if target is None:
                continue
            graph[path].append(target)
            target_layer = layer_of(target)
            if layer and target_layer and LAYERS.index(target_layer) > LAYERS.index(layer):
                problems.append(f"{path.relative_to(ROOT)} ({layer}) includes "
                                f"{name} ({target_layer}): a lower layer includes a higher one")
        if layer in ("core", "exec"):
            for name, _ in SYSTEM.findall(text):
                problems.append(f"{path.relative_to(ROOT)} ({layer}) includes {name}: "
                                f"the {layer} layer knows nothing of gRPC or protobuf")
    # Cycles among headers: depth-first search with colours.
    colour = {}

    def visit(node, stack):
        colour[node] = "grey"
        stack.append(node)
        for nxt in graph.get(node, []):
            if colour.get(nxt) == "grey":
                cycle = stack[stack.index(nxt):] + [nxt]
                problems.append("include cycle: " +
                                " -> ".join(str(p.relative_to(ROOT)) for p in cycle))
            elif nxt not in colour:
                visit(nxt, stack)
        stack.pop()
        colour[node] = "black"

    for node in graph:
        if node not in colour:
            visit(node, [])
    for problem in problems:
        print(f"check-layers: {problem}", file=sys.stderr)
    if problems:
        return 1
    print(f"check-layers: {len(files)} files, no cycle, every include points down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
