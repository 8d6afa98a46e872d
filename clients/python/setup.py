"""pip install ./clients/python: the package, with its gRPC modules
generated from the repository's proto/ as it builds (see generate.py)."""
import os
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import generate  # noqa: E402


class BuildWithWire(build_py):
    def run(self):
        super().run()
        generate.generate(self.build_lib)


# The project's one version (the binary's too), in the repository beside
# the proto the package is built from.
with open(os.path.join(generate.PROTO_ROOT, "..", "VERSION"),
          encoding="utf-8") as version:
    VERSION = version.read().strip()

setup(version=VERSION, cmdclass={"build_py": BuildWithWire})
