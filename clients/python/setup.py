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


setup(cmdclass={"build_py": BuildWithWire})
