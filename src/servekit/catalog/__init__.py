"""servekit.catalog."""

from typing import TYPE_CHECKING

from servekit.lazyface import lazy_face

if TYPE_CHECKING:
    from servekit.catalog.families import (
        ANY_ROLE,
        DefaultsRow,
        defaults_rows,
        family_script_defaults,
        family_users,
    )
    from servekit.catalog.ledger import (
        NOT_OBSERVED,
        LedgerRecord,
        VerificationStatus,
        append_record,
        ledger_path,
        ledger_records,
        observed_summary,
        read_records,
        status_from_records,
        verification_status,
    )
    from servekit.catalog.loader import (
        LAYOUT_FILE,
        LoadedLayout,
        canonical_name,
        layout_path,
        load,
        load_all,
        packaged_catalog,
        parse_layout_text,
        resolve_catalog,
    )
    from servekit.catalog.options import (
        CatalogSiteOptions,
        DefaultsOptions,
        LayoutsCheckOptions,
        LayoutsImportOptions,
        LayoutsListOptions,
        LayoutsShowOptions,
        catalog_field,
    )
    from servekit.catalog.options_derive import (
        LayoutsDiffOptions,
        LayoutsDriftOptions,
        LayoutsNewOptions,
    )
    from servekit.catalog.profiles import PROFILES_DIR
    from servekit.catalog.schema import (
        LAYOUT_NAME,
        MAX_NODES,
        VERIFY_WORKLOADS,
        ArgValue,
        Engine,
        EnvValue,
        Layout,
        NodeValue,
        Prepend,
        Proxy,
    )

__getattr__, __dir__ = lazy_face(__name__)
__all__ = [
    "ANY_ROLE",
    "LAYOUT_FILE",
    "LAYOUT_NAME",
    "MAX_NODES",
    "NOT_OBSERVED",
    "PROFILES_DIR",
    "VERIFY_WORKLOADS",
    "ArgValue",
    "CatalogSiteOptions",
    "DefaultsOptions",
    "DefaultsRow",
    "Engine",
    "EnvValue",
    "Layout",
    "LayoutsCheckOptions",
    "LayoutsDiffOptions",
    "LayoutsDriftOptions",
    "LayoutsImportOptions",
    "LayoutsListOptions",
    "LayoutsNewOptions",
    "LayoutsShowOptions",
    "LedgerRecord",
    "LoadedLayout",
    "NodeValue",
    "Prepend",
    "Proxy",
    "VerificationStatus",
    "append_record",
    "canonical_name",
    "catalog_field",
    "defaults_rows",
    "family_script_defaults",
    "family_users",
    "layout_path",
    "ledger_path",
    "ledger_records",
    "load",
    "load_all",
    "observed_summary",
    "packaged_catalog",
    "parse_layout_text",
    "read_records",
    "resolve_catalog",
    "status_from_records",
    "verification_status",
]
