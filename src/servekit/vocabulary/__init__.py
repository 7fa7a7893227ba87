"""servekit's vocabulary: every word more than one package uses, defined once.

Roles, engine kinds, the vLLM metric names the figures read, the URL check,
atomic writes, Markdown cells and the strict frozen model live here, at the
bottom of the layers, so that no package redefines them and a change to one of
them is one edit. Modules the proxy's zipapp needs are standard library only
(the zipapp runs on an engine image without pydantic); the face imports nothing
up front for the same reason.

    from servekit.vocabulary import PREFIX_CACHE_HITS, ROLES, EngineKind, ProxyMode
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servekit.lazyface import lazy_face

if TYPE_CHECKING:
    # The utility words: URL check, atomic write, strict model, Markdown cells, bounded reads.
    from servekit.vocabulary.atomic import atomic_write_bytes, atomic_write_text, atomic_writer
    from servekit.vocabulary.cliargs import (
        FlagOf,
        OptionSpec,
        build_parser,
        check_fields,
        dataclass_options,
        kebab_flag,
        option,
        parse_known_values,
        parse_values,
        spec_of,
        value_type,
    )

    # The domain words: roles, engines, vLLM metric names, KV/proxy/guard modes.
    from servekit.vocabulary.engines import (
        ENGINE_KINDS,
        SERVED_BY,
        STARTABLE,
        UNCONFIRMED,
        EngineKind,
        Observed,
        RunEngine,
        ServedBy,
        Startable,
    )
    from servekit.vocabulary.markdown import markdown_cell
    from servekit.vocabulary.metrics import (
        BY_SOURCE_SERIES,
        CACHE_CONFIG_INFO,
        E2E_REQUEST_LATENCY_SECONDS,
        EXTERNAL_HIT_SERIES,
        EXTERNAL_PREFIX_CACHE_HITS,
        EXTERNAL_PREFIX_CACHE_QUERIES,
        GENERATION_TOKENS,
        GPU_PREFIX_CACHE_HITS,
        INTER_TOKEN_LATENCY_SECONDS,
        KV_CACHE_USAGE_PERC,
        NUM_GPU_BLOCKS,
        NUM_PREEMPTIONS,
        NUM_REQUESTS_RUNNING,
        NUM_REQUESTS_WAITING,
        PREFIX_CACHE_HITS,
        PREFIX_CACHE_QUERIES,
        PREFIX_HIT_SERIES,
        PROMPT_TOKENS,
        PROMPT_TOKENS_BY_SOURCE,
        REQUEST_DECODE_TIME_SECONDS,
        REQUEST_PREFILL_TIME_SECONDS,
        REQUEST_QUEUE_TIME_SECONDS,
        REQUEST_SUCCESS,
        SPEC_DECODE_NUM_ACCEPTED_TOKENS,
        SPEC_DECODE_NUM_DRAFT_TOKENS,
        SPEC_DECODE_NUM_DRAFTS,
        TIME_PER_OUTPUT_TOKEN_SECONDS,
        TIME_TO_FIRST_TOKEN_SECONDS,
        total,
    )
    from servekit.vocabulary.model import StrictModel
    from servekit.vocabulary.modes import (
        KV_PROTOCOLS,
        LAYOUT_PROXY_MODES,
        PAIRED_PROXY_MODES,
        PD_PROXY_MODES,
        PROXY_MODE_OF,
        PROXY_MODES,
        GuardMode,
        KvProtocol,
        LayoutProxyMode,
        ProxyMode,
    )
    from servekit.vocabulary.reading import read_at_most
    from servekit.vocabulary.roles import (
        PD_ROLES,
        PROXY_POOLS,
        ROLES,
        EndpointRole,
        PdRole,
        ProcessRole,
        ProxyPool,
        Role,
    )
    from servekit.vocabulary.urls import MAX_HOST, SCHEMES, check_url, is_url


__getattr__, __dir__ = lazy_face(__name__)
__all__ = [
    "BY_SOURCE_SERIES",
    "CACHE_CONFIG_INFO",
    "E2E_REQUEST_LATENCY_SECONDS",
    "ENGINE_KINDS",
    "EXTERNAL_HIT_SERIES",
    "EXTERNAL_PREFIX_CACHE_HITS",
    "EXTERNAL_PREFIX_CACHE_QUERIES",
    "GENERATION_TOKENS",
    "GPU_PREFIX_CACHE_HITS",
    "INTER_TOKEN_LATENCY_SECONDS",
    "KV_CACHE_USAGE_PERC",
    "KV_PROTOCOLS",
    "LAYOUT_PROXY_MODES",
    "MAX_HOST",
    "NUM_GPU_BLOCKS",
    "NUM_PREEMPTIONS",
    "NUM_REQUESTS_RUNNING",
    "NUM_REQUESTS_WAITING",
    "PAIRED_PROXY_MODES",
    "PD_PROXY_MODES",
    "PD_ROLES",
    "PREFIX_CACHE_HITS",
    "PREFIX_CACHE_QUERIES",
    "PREFIX_HIT_SERIES",
    "PROMPT_TOKENS",
    "PROMPT_TOKENS_BY_SOURCE",
    "PROXY_MODES",
    "PROXY_MODE_OF",
    "PROXY_POOLS",
    "REQUEST_DECODE_TIME_SECONDS",
    "REQUEST_PREFILL_TIME_SECONDS",
    "REQUEST_QUEUE_TIME_SECONDS",
    "REQUEST_SUCCESS",
    "ROLES",
    "SCHEMES",
    "SERVED_BY",
    "SPEC_DECODE_NUM_ACCEPTED_TOKENS",
    "SPEC_DECODE_NUM_DRAFTS",
    "SPEC_DECODE_NUM_DRAFT_TOKENS",
    "STARTABLE",
    "TIME_PER_OUTPUT_TOKEN_SECONDS",
    "TIME_TO_FIRST_TOKEN_SECONDS",
    "UNCONFIRMED",
    "EndpointRole",
    "EngineKind",
    "FlagOf",
    "GuardMode",
    "KvProtocol",
    "LayoutProxyMode",
    "Observed",
    "OptionSpec",
    "PdRole",
    "ProcessRole",
    "ProxyMode",
    "ProxyPool",
    "Role",
    "RunEngine",
    "ServedBy",
    "Startable",
    "StrictModel",
    "atomic_write_bytes",
    "atomic_write_text",
    "atomic_writer",
    "build_parser",
    "check_fields",
    "check_url",
    "dataclass_options",
    "is_url",
    "kebab_flag",
    "markdown_cell",
    "option",
    "parse_known_values",
    "parse_values",
    "read_at_most",
    "spec_of",
    "total",
    "value_type",
]
