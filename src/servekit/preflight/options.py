"""The options of ``servekit preflight``: one model for the CLI, the code and the docs."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator

from servekit.vocabulary import StrictModel


class PreflightOptions(StrictModel):
    """What ``servekit preflight`` is asked: show the checks, run one node's, or compare."""

    name: str = Field(description="layout name, e.g. a3/deepseekv4-flash/2p2d")
    node: int | None = Field(
        default=None,
        ge=0,
        description="run node K's preflight on this machine (as its rendered entry does) and "
        "compare with the others: give --addresses or --shared",
    )
    addresses: str | None = Field(
        default=None,
        description="with --node: every node's address in node order (IP,IP,...): the units "
        "exchange their results over HTTP there",
    )
    shared: Path | None = Field(
        default=None,
        description="with --node: a folder every node shares, to exchange the results through "
        "instead (a fresh one per launch)",
    )
    bind_ports: str = Field(
        default="0.0.0.0",
        description="with --node: the address the engines bind (each port is tried)",
    )
    timeout: int = Field(
        default=600, ge=1, le=86400, description="with --node: seconds to wait for the other nodes"
    )
    log_dir: Path | None = Field(
        default=None,
        description="with --node: write the results (and, on node 0, the report) under "
        "LOG_DIR/preflight/",
    )
    report: Path | None = Field(
        default=None,
        description="compare the node results in a folder (LOG_DIR/preflight/<layout> or a "
        "shared folder) and print the report; exit 1 when it fails",
    )
    json_out: bool = Field(
        default=False,
        description="print JSON instead of the table",
        json_schema_extra={"flag": "--json"},
    )
    set: tuple[str, ...] = Field(
        default=(), description="override a field, e.g. engines.decode0.tp=8 (repeatable)"
    )
    catalog: Path | None = Field(
        default=None,
        description="catalog folder (default: SERVEKIT_CATALOG or the packaged catalog)",
    )

    @model_validator(mode="after")
    def _one_mode(self) -> PreflightOptions:
        if self.node is not None and self.report is not None:
            raise ValueError("--node and --report: give one (run a node, or compare a folder)")
        if self.node is None and (self.addresses or self.shared or self.log_dir):
            raise ValueError("--addresses, --shared and --log-dir go with --node K")
        if self.node is not None and not (self.addresses or self.shared):
            raise ValueError("--node: give --addresses IP,IP,... or --shared FOLDER")
        return self

    def address_list(self) -> list[str]:
        return [a.strip() for a in (self.addresses or "").split(",")]
