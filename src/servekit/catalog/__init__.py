"""servekit.catalog."""

from typing import TYPE_CHECKING

from servekit.lazyface import lazy_face

if TYPE_CHECKING:
    from servekit.catalog.families import (
        ANY_ROLE as ANY_ROLE,
        DefaultsRow as DefaultsRow,
        defaults_rows as defaults_rows,
        family_script_defaults as family_script_defaults,
        family_users as family_users,
    )
    from servekit.catalog.ledger import (
        NOT_OBSERVED as NOT_OBSERVED,
        LedgerRecord as LedgerRecord,
        VerificationStatus as VerificationStatus,
        append_record as append_record,
        ledger_path as ledger_path,
        ledger_records as ledger_records,
        observed_summary as observed_summary,
        read_records as read_records,
        status_from_records as status_from_records,
        verification_status as verification_status,
    )
    from servekit.catalog.loader import (
        LAYOUT_FILE as LAYOUT_FILE,
        LoadedLayout as LoadedLayout,
        aliases_of as aliases_of,
        canonical_name as canonical_name,
        layout_names as layout_names,
        layout_path as layout_path,
        load as load,
        load_all as load_all,
        packaged_catalog as packaged_catalog,
        parse_layout_text as parse_layout_text,
        resolve_catalog as resolve_catalog,
    )
    from servekit.catalog.names import LAYOUT_NAME as LAYOUT_NAME, LayoutName as LayoutName
    from servekit.catalog.options import (
        CatalogSiteOptions as CatalogSiteOptions,
        DefaultsOptions as DefaultsOptions,
        LayoutsCheckOptions as LayoutsCheckOptions,
        LayoutsDiffOptions as LayoutsDiffOptions,
        LayoutsDriftOptions as LayoutsDriftOptions,
        LayoutsImportOptions as LayoutsImportOptions,
        LayoutsListOptions as LayoutsListOptions,
        LayoutsNewOptions as LayoutsNewOptions,
        LayoutsShowOptions as LayoutsShowOptions,
        catalog_field as catalog_field,
    )
    from servekit.catalog.profiles import (
        MERGED_MAPPINGS as MERGED_MAPPINGS,
        PROFILES_DIR as PROFILES_DIR,
        RoleProfile as RoleProfile,
    )
    from servekit.catalog.schema import (
        MAX_NODES as MAX_NODES,
        VERIFY_WORKLOADS as VERIFY_WORKLOADS,
        ArgValue as ArgValue,
        Engine as Engine,
        EnvValue as EnvValue,
        Hardware as Hardware,
        Layout as Layout,
        NodeValue as NodeValue,
        Prepend as Prepend,
        Proxy as Proxy,
    )
    from servekit.catalog.topology import (
        GRAMMAR as GRAMMAR,
        Topology as Topology,
        name_nodes as name_nodes,
    )

__getattr__, __dir__ = lazy_face(__name__)
