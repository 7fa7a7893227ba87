"""Which tests may not run beside each other under pytest-xdist.

``make test`` runs pytest with ``-n 2 --dist loadgroup``: the tests of one
``xdist_group`` run one after another on one worker, everything else wherever a
worker is free. Real vLLM engines take most of a core each, so every ``vllm`` test
is put in :data:`SERIAL_GROUP` (tests/conftest.py) unless it names its own group
(tests/local/test_pip_install.py: mostly pip, on free ports); so is a test that binds a port
the catalog fixes (``servekit up`` without ``--free-ports``), with :data:`serial`.
"""

from __future__ import annotations

import pytest

SERIAL_GROUP = "serial"
serial = pytest.mark.xdist_group(SERIAL_GROUP)
