"""The preflight's node side: the files the renderer ships beside the scripts.

``servekit_preflight.py`` (the entry), ``servekit_preflight_probe.py`` (one
node's checks) and ``servekit_preflight_share.py`` (the exchange and the report
across nodes) run in the engine image, where servekit is not installed:
standard library only, Python 3.8 syntax, each importing the others by
relative import here and by their own names beside the scripts.
"""
