"""servekit.catalog."""
