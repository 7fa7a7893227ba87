"""The names of vLLM's Prometheus metrics, written once.

The simulator exports them (servekit.sim.metrics) and the checks, benchmarks
and demos read them; a rename in a vLLM release is one edit here. Counters are
named without the ``_total`` suffix that prometheus_client's text format adds
(:func:`total` spells that series); some are read under two names because vLLM
releases differ. Standard library only.
"""

from __future__ import annotations

PREFIX = "vllm:"

# Gauges
NUM_REQUESTS_RUNNING = "vllm:num_requests_running"
NUM_REQUESTS_WAITING = "vllm:num_requests_waiting"
KV_CACHE_USAGE_PERC = "vllm:kv_cache_usage_perc"
NUM_GPU_BLOCKS = "vllm:num_gpu_blocks"
CACHE_CONFIG_INFO = "vllm:cache_config_info"

# Counters
PROMPT_TOKENS = "vllm:prompt_tokens"
PROMPT_TOKENS_BY_SOURCE = "vllm:prompt_tokens_by_source"
GENERATION_TOKENS = "vllm:generation_tokens"
PREFIX_CACHE_QUERIES = "vllm:prefix_cache_queries"
PREFIX_CACHE_HITS = "vllm:prefix_cache_hits"
GPU_PREFIX_CACHE_HITS = "vllm:gpu_prefix_cache_hits"  # older vLLM's name
EXTERNAL_PREFIX_CACHE_QUERIES = "vllm:external_prefix_cache_queries"
EXTERNAL_PREFIX_CACHE_HITS = "vllm:external_prefix_cache_hits"
SPEC_DECODE_NUM_DRAFTS = "vllm:spec_decode_num_drafts"
SPEC_DECODE_NUM_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
SPEC_DECODE_NUM_ACCEPTED_TOKENS = "vllm:spec_decode_num_accepted_tokens"
NUM_PREEMPTIONS = "vllm:num_preemptions"
REQUEST_SUCCESS = "vllm:request_success"

# Histograms
TIME_TO_FIRST_TOKEN_SECONDS = "vllm:time_to_first_token_seconds"
INTER_TOKEN_LATENCY_SECONDS = "vllm:inter_token_latency_seconds"
TIME_PER_OUTPUT_TOKEN_SECONDS = "vllm:time_per_output_token_seconds"  # deprecated ITL alias
E2E_REQUEST_LATENCY_SECONDS = "vllm:e2e_request_latency_seconds"
REQUEST_QUEUE_TIME_SECONDS = "vllm:request_queue_time_seconds"
REQUEST_PREFILL_TIME_SECONDS = "vllm:request_prefill_time_seconds"
REQUEST_DECODE_TIME_SECONDS = "vllm:request_decode_time_seconds"


def total(counter: str) -> str:
    """The series a counter is exposed as in the text format (``<name>_total``)."""
    return f"{counter}_total"


PREFIX_HIT_SERIES = (total(PREFIX_CACHE_HITS), total(GPU_PREFIX_CACHE_HITS))
"""Local prefix-cache hits (tokens), under either vLLM's name."""
EXTERNAL_HIT_SERIES = (total(EXTERNAL_PREFIX_CACHE_HITS), EXTERNAL_PREFIX_CACHE_HITS)
"""Tokens loaded through the KV connector, with or without the suffix."""
BY_SOURCE_SERIES = (total(PROMPT_TOKENS_BY_SOURCE), PROMPT_TOKENS_BY_SOURCE)
"""Prompt tokens by where their KV came from, with or without the suffix."""
