"""servekit.proxy."""
