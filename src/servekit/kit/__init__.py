"""servekit.kit."""
