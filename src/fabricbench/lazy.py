"""numpy, imported at its first use rather than when a module that names it is imported.

Every module the command line reads (the transports' declarations, the kernels, the collectives) also holds
code that runs on a rank and uses numpy. ``--help`` and the self-launching parent, which only plans and starts
mpiexec, need none of it; numpy's import is most of what importing ``fabricbench.cli`` would cost. Those
modules write ``from fabricbench.lazy import np`` and use ``np`` as usual: the first name read imports numpy,
and each name read is kept on the object, so later reads cost what a module attribute costs.
"""

from __future__ import annotations

import importlib


class LazyModule:
    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attribute: str):  # only reached for a name not yet kept
        value = getattr(importlib.import_module(self._name), attribute)
        setattr(self, attribute, value)
        return value

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}>"


np = LazyModule("numpy")
