#!/usr/bin/env python3
"""Writes BUILD/tidy/compile_commands.json for `make tidy`: BUILD's compile
commands without GCC's precompiled headers (cmake/pch.cmake), which clang
cannot read, so that clang-tidy parses every file with the includes it
names itself."""
import json
import os
import shlex
import sys


def without_pch(command: str) -> str:
    args, out, skip = shlex.split(command), [], False
    for i, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if arg == "-include" and i + 1 < len(args) and args[i + 1].endswith("cmake_pch.hxx"):
            skip = True
            continue
        if arg == "-Winvalid-pch":
            continue
        out.append(arg)
    return shlex.join(out)


def main() -> None:
    build = sys.argv[1]
    with open(os.path.join(build, "compile_commands.json")) as f:
        entries = json.load(f)
    for e in entries:
        e["command"] = without_pch(e["command"])
    os.makedirs(os.path.join(build, "tidy"), exist_ok=True)
    with open(os.path.join(build, "tidy", "compile_commands.json"), "w") as f:
        json.dump(entries, f, indent=1)


if __name__ == "__main__":
    main()
