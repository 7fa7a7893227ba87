"""Environment values a node resolves when it starts, and their two renderings.

The catalog's typed values (:class:`~servekit.catalog.schema.NodeValue`,
:class:`~servekit.catalog.schema.Prepend`) plus one the Plan adds itself
(:class:`BundlePrepend`, the folder of servekit's bundled files on PYTHONPATH)
become either a shell word for rendered scripts (only servekit's own variable
references are ever left unquoted: a value from a layout is always quoted, so no
value can run a command) or a concrete string for a process started here.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping

from pydantic import Field

from servekit.catalog import EnvValue, NodeValue, Prepend
from servekit.render.command import Ref, Word, node_var
from servekit.vocabulary import StrictModel

BUNDLE_REF = "${BUNDLE_DIR}"


class BundlePrepend(StrictModel):
    """The folder holding servekit's bundled files, in front of the inherited value."""

    bundle_dir: str = Field(description="the folder here, or ${BUNDLE_DIR} in scripts")
    sep: str = ":"


class NodeUrl(StrictModel):
    """A URL naming node ``node``'s address, which only that node's rank table tells.

    A layerwise decoder's guard must trust its proxy's metaserver; where the proxy
    listens on every address, the URL is built on the proxy node's own IP, which a
    rendered script knows only at launch (``${NODE<k>_IP}``).
    """

    node: int = Field(ge=0)
    prefix: str
    suffix: str

    @property
    def reference(self) -> str:
        return "${" + node_var(self.node) + "}"

    def with_host(self, host: str) -> str:
        """The URL on ``host``: the node's address here, or :attr:`reference` in scripts."""
        return self.prefix + host + self.suffix

    def word(self, host: str) -> Word:
        """The URL as one command word; ``host`` is the node's address here."""
        return Word(parts=(self.prefix, Ref(var=node_var(self.node), value=host), self.suffix))


AnyEnvValue = EnvValue | BundlePrepend | NodeUrl


def shell_value(name: str, value: AnyEnvValue) -> str:
    """The right-hand side of ``export NAME=...`` in a POSIX sh script."""
    if isinstance(value, str):
        return shlex.quote(value)
    if isinstance(value, NodeValue):
        return '"$NODE_IP"' if value.node == "ip" else '"$NODE_NIC"'
    if isinstance(value, NodeUrl):
        return shlex.quote(value.prefix) + '"' + value.reference + '"' + shlex.quote(value.suffix)
    inherited = '"${' + name + ':-}"'
    if isinstance(value, Prepend):
        return shlex.quote(value.prepend + value.sep) + inherited
    return '"$BUNDLE_DIR"' + shlex.quote(value.sep) + inherited


def resolve_value(
    name: str,
    value: AnyEnvValue,
    *,
    node_ip: str,
    node_nic: str,
    inherited: Mapping[str, str],
    node_ips: Mapping[int, str] | None = None,
) -> str:
    """The value a process started here gets (the same rule the scripts apply)."""
    if isinstance(value, str):
        return value
    if isinstance(value, NodeValue):
        return node_ip if value.node == "ip" else node_nic
    if isinstance(value, NodeUrl):
        if node_ips is None or value.node not in node_ips:
            raise ValueError(f"{name}: node {value.node}'s address is not known here")
        return value.with_host(node_ips[value.node])
    before = inherited.get(name, "")
    if isinstance(value, Prepend):
        return value.prepend + value.sep + before
    return value.bundle_dir + value.sep + before


def resolve_env(
    env: Mapping[str, AnyEnvValue],
    *,
    node_ip: str,
    node_nic: str,
    inherited: Mapping[str, str],
    node_ips: Mapping[int, str] | None = None,
) -> dict[str, str]:
    """Every value of a process's environment, resolved for this machine."""
    return {
        name: resolve_value(
            name, value, node_ip=node_ip, node_nic=node_nic, inherited=inherited, node_ips=node_ips
        )
        for name, value in env.items()
    }


def template_value(name: str, value: AnyEnvValue) -> str:
    """The value as the scripts' expansion would print it, with references unexpanded.

    ``${NODE_IP}``, ``${NODE_NIC}``, ``${BUNDLE_DIR}`` and ``${NAME:-}`` stand for
    what the node fills in; used by fidelity and dry-run comparisons.
    """
    return resolve_value(
        name,
        value,
        node_ip="${NODE_IP}",
        node_nic="${NODE_NIC}",
        inherited={name: "${" + name + ":-}"},
        node_ips={value.node: value.reference} if isinstance(value, NodeUrl) else None,
    )
