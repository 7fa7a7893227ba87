"""Started with every engine process servekit runs beside broken torch companions.

``servekit up`` puts this folder first on the engines' ``PYTHONPATH`` only when
:mod:`servekit.local.companions` found packages that cannot load beside the
installed torch (PyPI's CUDA builds of torchvision, torchaudio and torchcodec
next to torch's CPU build). Python imports ``sitecustomize`` at start-up, in
the API server and in every worker it spawns; this one marks the modules named
in ``SERVEKIT_HIDE_MODULES`` as absent (a ``None`` entry in ``sys.modules``
makes ``import`` raise ModuleNotFoundError and ``importlib.util.find_spec``
return None), so transformers and vLLM take their paths without them instead
of failing on "operator torchvision::nms does not exist". Then it runs the
interpreter's own ``sitecustomize``, if there is one further down the path.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys

HIDE_VAR = "SERVEKIT_HIDE_MODULES"


def _hide(names: str) -> None:
    for name in filter(None, (n.strip() for n in names.split(","))):
        if name not in sys.modules:
            sys.modules[name] = None  # type: ignore[assignment]


def _chain() -> None:
    """Run the next ``sitecustomize`` on sys.path (the one this file shadows)."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


_hide(os.environ.get(HIDE_VAR, ""))
_chain()
