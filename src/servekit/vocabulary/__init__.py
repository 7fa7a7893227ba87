"""servekit's vocabulary: every word more than one package uses, defined once.

Roles, engine kinds, the vLLM metric names the figures read, the URL check,
atomic writes, Markdown cells and the strict frozen model live here, at the
bottom of the layers, so that no package redefines them and a change to one of
them is one edit. Modules the proxy's zipapp needs are standard library only
(the zipapp runs on an engine image without pydantic); the face imports nothing
up front for the same reason.
"""

from __future__ import annotations
