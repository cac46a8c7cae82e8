"""Builds kbroker's one compiled module, the record structure check (kbroker/protocol/_recordcheck.c).

Everything else is in pyproject.toml. The extension is optional: where no C compiler is available the
install still succeeds and kbroker.protocol.record_check uses its Python version of the same check.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("kbroker.protocol._recordcheck", ["kbroker/protocol/_recordcheck.c"],
                             optional=True, extra_compile_args=["-O2"])])
