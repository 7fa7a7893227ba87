"""The kit's generated text files: README.md, Dockerfile, rebuild.sh, selftest.sh.

Rendered from MANIFEST.json alone with jinja2, so the files say exactly what
the manifest records and the same manifest always gives the same text.
"""

from __future__ import annotations

import functools
import shlex

import jinja2

from servekit.kit.models import KIT_ROLES, VAR_NAME, KitManifest, RoleValues
from servekit.kit.paths import whiteout_path

GENERATED = ("README.md", "Dockerfile", "rebuild.sh", "selftest.sh")


def _promise(value: object) -> str:
    """A promised default for README: ``1`` or ``decode `1`, prefill `0```."""
    if isinstance(value, RoleValues):
        return ", ".join(f"{r} `{v}`" for r in KIT_ROLES if (v := value.for_role(r)) is not None)
    return f"`{value}`"


@functools.cache
def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("servekit.kit", "templates"),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["shq"] = shlex.quote
    env.filters["whiteout"] = whiteout_path
    env.filters["promise"] = _promise
    # Keys Docker cannot take unquoted are listed in a comment, not replayed.
    env.tests["env_name"] = lambda key: bool(VAR_NAME.fullmatch(key))
    env.tests["one_line"] = lambda text: text.isprintable() and text.strip() == text != ""
    return env


# Schema 1 kits (before promises and the image-mode selftest) and schema 2 kits (before
# the smoke proof's nonce) keep the text they were written with, so a kit built by an
# earlier servekit still passes its generated check.
_OLD = ("README.md", "selftest.sh")


def _template(name: str, schema: int) -> str:
    return f"v{schema}/{name}.j2" if schema in (1, 2) and name in _OLD else f"{name}.j2"


def render_all(manifest: KitManifest) -> dict[str, str]:
    """Every generated file's text, keyed by its name in the kit."""
    env = _env()
    return {
        name: env.get_template(_template(name, manifest.schema_version)).render(m=manifest)
        for name in GENERATED
    }
