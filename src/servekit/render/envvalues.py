"""Environment values a node resolves when it starts, and their two renderings.

The catalog's typed values (:class:`~servekit.catalog.schema.NodeValue`,
:class:`~servekit.catalog.schema.Prepend`) plus two the Plan adds itself
(:class:`BundlePrepend`, the folder of servekit's bundled files on PYTHONPATH;
:class:`AddressUrl`, a URL on another process's address) become either a shell word for rendered scripts (only servekit's own variable
references are ever left unquoted: a value from a layout is always quoted, so no
value can run a command) or a concrete string for a process started here.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping

from pydantic import Field

from servekit.catalog import EnvValue, NodeValue, Prepend
from servekit.render.command import shell_word
from servekit.render.wiring import Address, script_host, url, url_word
from servekit.vocabulary import StrictModel

BUNDLE_REF = "${BUNDLE_DIR}"


class BundlePrepend(StrictModel):
    """The folder holding servekit's bundled files, in front of the inherited value."""

    bundle_dir: str = Field(description="the folder here, or ${BUNDLE_DIR} in scripts")
    sep: str = ":"


class AddressUrl(StrictModel):
    """A URL on another process's address, which only its node's rank table tells.

    A layerwise decoder's guard must trust its proxy's metaserver; where the proxy
    listens on every address, the URL is built on the proxy's own address (in a
    rendered script ``${NODE<k>_IP}``, filled in at launch).
    """

    address: Address
    path: str = ""

    def text(self, node_ips: Mapping[int, str]) -> str:
        """The URL with node ``k`` at ``node_ips[k]``."""
        return url(self.address, lambda a: node_ips[a.node], self.path)

    def template(self) -> str:
        """The URL as a script's expansion would print it, ``${NODE<k>_IP}`` unexpanded."""
        return url(self.address, script_host, self.path)


AnyEnvValue = EnvValue | BundlePrepend | AddressUrl


def shell_value(name: str, value: AnyEnvValue) -> str:
    """The right-hand side of ``export NAME=...`` in a POSIX sh script."""
    if isinstance(value, str):
        return shlex.quote(value)
    if isinstance(value, NodeValue):
        return '"$NODE_IP"' if value.node == "ip" else '"$NODE_NIC"'
    if isinstance(value, AddressUrl):
        return shell_word(url_word(value.address, script_host, value.path))
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
    if isinstance(value, AddressUrl):
        if node_ips is None or value.address.node not in node_ips:
            raise ValueError(f"{name}: node {value.address.node}'s address is not known here")
        return value.text(node_ips)
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
        node_ips=_references(value),
    )


def _references(value: AnyEnvValue) -> dict[int, str] | None:
    """The node addresses of a value as script references (``${NODE<k>_IP}``)."""
    if not isinstance(value, AddressUrl):
        return None
    return {value.address.node: str(script_host(value.address).value)}
