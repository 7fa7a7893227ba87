"""The one error a kit raises for input it will not touch.

Hostile or malformed images and kits are bad user input, so :class:`KitRefused`
is a :class:`~servekit.errors.UsageError`: one line naming what was refused and
why, exit code 2. ``kit verify`` catches it and reports a failed check instead.
"""

from __future__ import annotations

from servekit.errors import UsageError


class KitRefused(UsageError):
    """An image, layer, payload or kit that breaks a safety or format rule."""


class KitTooLarge(KitRefused):
    """A kit past a bound on what servekit reads of it (MANIFEST.json's bytes or entries).

    ``kit verify`` reports other refusals as a failed check and carries on; this
    one stops it with exit 2, because nothing after it can be read in bounded
    memory and a report of passing rows would mislead.
    """
