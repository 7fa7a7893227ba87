"""The one URL check and the one URL builder.

:func:`check_url`: a server's root URL as a person types it, or one line saying why not.

The CLI (``--target``, ``--entry``, ``--reference``), deployment.json and the proxy's
backends (``--prefill``/``--decode``/``--replica`` and the admin API) all take
``http://HOST:PORT``; one strict check keeps them agreeing on what that means.
Caught here, a typo (``http://x:99999``, ``http://x:0``, ``http://[::1``) is one
line and exit 2, not a run of requests that all fail against nothing.

:func:`url_for`: every URL servekit writes from a host and a port (an engine's
API, a bootstrap server, a KV-event publisher, a server's own address) is built
by it, so an IPv6 literal is bracketed everywhere or nowhere. Standard library
only: the proxy's zipapp carries this module.
"""

from __future__ import annotations

from urllib.parse import SplitResult, unquote, urlsplit

from servekit.errors import UsageError

SCHEMES = ("http://", "https://")
# The longest host name DNS allows (RFC 1035: 255 octets on the wire, 253 written).
MAX_HOST = 253


def url_host(host: str) -> str:
    """``host`` as it stands in a URL: an IPv6 literal in brackets (``[::1]``), else as is."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def url_for(host: str, port: int | str, path: str = "", *, scheme: str = "http") -> str:
    """``scheme://HOST:PORT/path`` of a server at ``host:port`` (IPv6 literals bracketed)."""
    return f"{scheme}://{url_host(host)}:{port}{path}"


def is_url(text: str | None) -> bool:
    """Whether ``text`` names a server by URL (rather than a layout name or a file)."""
    return text is not None and text.startswith(SCHEMES)


def _split(text: str, flag: str, shown: str) -> SplitResult:
    """``urlsplit`` with its port read, refusing userinfo without ever echoing it."""
    try:
        parts = urlsplit(text)
        if "@" in parts.netloc:
            raise UsageError(
                f"{flag} {parts.scheme}://...@{parts.netloc.rpartition('@')[2][:80]}: drop the "
                "user:password@ part; the URL is written into deployment.json, run.json "
                "and report.html"
            )
        port = parts.port
    except ValueError as exc:
        raise UsageError(
            f"{flag} {shown}: not a usable URL ({exc}); give http://HOST:PORT"
        ) from None
    if port == 0:
        raise UsageError(f"{flag} {shown}: give the server's root URL, http://HOST:PORT")
    return parts


def check_url(text: str, flag: str = "--target") -> str:
    """A server's root URL, checked; returned without a trailing slash.

    Refused, each in one line naming ``flag``: a scheme other than http(s), no
    host, a port out of 1..65535, ``user:pass@`` (the URL is written into
    deployment.json, run.json and report.html, so a credential in it would be
    published; the refusal never echoes it), a query or fragment (even an empty
    ``?`` or ``#``), any whitespace or unprintable character (``http://h :8000``),
    a host longer than DNS allows (253 characters), and ``.``/``..`` path segments (``/../``), which a client
    and a proxy may resolve differently.
    """
    shown = text[:200] if text.isprintable() else repr(text[:200])
    parts = _split(text, flag, shown)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(
            f"{flag} {shown}: not a server URL (expected http://HOST:PORT); "
            "give http://HOST:PORT (or https://)"
        )
    if "?" in text or "#" in text or not text.isprintable():
        raise UsageError(f"{flag} {shown}: give the server's root URL, http://HOST:PORT")
    if any(c.isspace() for c in text):
        raise UsageError(f"{flag} {shown}: a URL has no spaces; give http://HOST:PORT")
    if len(parts.hostname) > MAX_HOST:
        raise UsageError(
            f"{flag} {text[:80]}...: the host is longer than {MAX_HOST} characters; "
            "give a real host name"
        )
    segments = [unquote(s) for s in parts.path.split("/")]
    if "." in segments or ".." in segments:
        raise UsageError(f"{flag} {shown}: no . or .. path segments; give the server's root URL")
    return text.rstrip("/")
