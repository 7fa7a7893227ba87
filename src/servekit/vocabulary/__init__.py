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
    from servekit.vocabulary.atomic import (
        atomic_write_bytes as atomic_write_bytes,
        atomic_write_text as atomic_write_text,
        atomic_writer as atomic_writer,
    )
    from servekit.vocabulary.cliargs import (
        FlagOf as FlagOf,
        OptionSpec as OptionSpec,
        build_parser as build_parser,
        check_fields as check_fields,
        dataclass_options as dataclass_options,
        kebab_flag as kebab_flag,
        option as option,
        parse_known_values as parse_known_values,
        parse_values as parse_values,
        spec_of as spec_of,
        value_type as value_type,
    )

    # The domain words: roles, engines, vLLM metric names, KV/proxy/guard modes.
    from servekit.vocabulary.engines import (
        ENGINE_KINDS as ENGINE_KINDS,
        SERVED_BY as SERVED_BY,
        STARTABLE as STARTABLE,
        UNCONFIRMED as UNCONFIRMED,
        EngineKind as EngineKind,
        Observed as Observed,
        RunEngine as RunEngine,
        ServedBy as ServedBy,
        Startable as Startable,
    )
    from servekit.vocabulary.markdown import markdown_cell as markdown_cell
    from servekit.vocabulary.metrics import (
        BY_SOURCE_SERIES as BY_SOURCE_SERIES,
        CACHE_CONFIG_INFO as CACHE_CONFIG_INFO,
        E2E_REQUEST_LATENCY_SECONDS as E2E_REQUEST_LATENCY_SECONDS,
        EXTERNAL_HIT_SERIES as EXTERNAL_HIT_SERIES,
        EXTERNAL_PREFIX_CACHE_HITS as EXTERNAL_PREFIX_CACHE_HITS,
        EXTERNAL_PREFIX_CACHE_QUERIES as EXTERNAL_PREFIX_CACHE_QUERIES,
        GENERATION_TOKENS as GENERATION_TOKENS,
        GPU_PREFIX_CACHE_HITS as GPU_PREFIX_CACHE_HITS,
        INTER_TOKEN_LATENCY_SECONDS as INTER_TOKEN_LATENCY_SECONDS,
        KV_CACHE_USAGE_PERC as KV_CACHE_USAGE_PERC,
        NUM_GPU_BLOCKS as NUM_GPU_BLOCKS,
        NUM_PREEMPTIONS as NUM_PREEMPTIONS,
        NUM_REQUESTS_RUNNING as NUM_REQUESTS_RUNNING,
        NUM_REQUESTS_WAITING as NUM_REQUESTS_WAITING,
        PREFIX_CACHE_HITS as PREFIX_CACHE_HITS,
        PREFIX_CACHE_QUERIES as PREFIX_CACHE_QUERIES,
        PREFIX_HIT_SERIES as PREFIX_HIT_SERIES,
        PROMPT_TOKENS as PROMPT_TOKENS,
        PROMPT_TOKENS_BY_SOURCE as PROMPT_TOKENS_BY_SOURCE,
        REQUEST_DECODE_TIME_SECONDS as REQUEST_DECODE_TIME_SECONDS,
        REQUEST_PREFILL_TIME_SECONDS as REQUEST_PREFILL_TIME_SECONDS,
        REQUEST_QUEUE_TIME_SECONDS as REQUEST_QUEUE_TIME_SECONDS,
        REQUEST_SUCCESS as REQUEST_SUCCESS,
        SPEC_DECODE_NUM_ACCEPTED_TOKENS as SPEC_DECODE_NUM_ACCEPTED_TOKENS,
        SPEC_DECODE_NUM_DRAFT_TOKENS as SPEC_DECODE_NUM_DRAFT_TOKENS,
        SPEC_DECODE_NUM_DRAFTS as SPEC_DECODE_NUM_DRAFTS,
        TIME_PER_OUTPUT_TOKEN_SECONDS as TIME_PER_OUTPUT_TOKEN_SECONDS,
        TIME_TO_FIRST_TOKEN_SECONDS as TIME_TO_FIRST_TOKEN_SECONDS,
        total as total,
    )
    from servekit.vocabulary.model import StrictModel as StrictModel
    from servekit.vocabulary.modes import (
        KV_PROTOCOLS as KV_PROTOCOLS,
        LAYOUT_PROXY_MODES as LAYOUT_PROXY_MODES,
        PAIRED_PROXY_MODES as PAIRED_PROXY_MODES,
        PD_PROXY_MODES as PD_PROXY_MODES,
        PROXY_MODE_OF as PROXY_MODE_OF,
        PROXY_MODES as PROXY_MODES,
        GuardMode as GuardMode,
        KvProtocol as KvProtocol,
        LayoutProxyMode as LayoutProxyMode,
        ProxyMode as ProxyMode,
    )
    from servekit.vocabulary.reading import (
        read_at_most as read_at_most,
        sha256_file as sha256_file,
        walk_tree as walk_tree,
    )
    from servekit.vocabulary.roles import (
        ENDPOINT_GROUPS as ENDPOINT_GROUPS,
        KV_ROLE_OF as KV_ROLE_OF,
        PD_ROLES as PD_ROLES,
        PROXY_POOLS as PROXY_POOLS,
        ROLES as ROLES,
        EndpointGroup as EndpointGroup,
        EndpointRole as EndpointRole,
        KvRole as KvRole,
        PdRole as PdRole,
        ProcessRole as ProcessRole,
        ProxyPool as ProxyPool,
        Role as Role,
        role_of_kv as role_of_kv,
    )
    from servekit.vocabulary.urls import (
        MAX_HOST as MAX_HOST,
        SCHEMES as SCHEMES,
        check_url as check_url,
        is_url as is_url,
        url_for as url_for,
        url_host as url_host,
    )


__getattr__, __dir__ = lazy_face(__name__)
