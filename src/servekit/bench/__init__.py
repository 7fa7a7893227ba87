"""servekit.bench."""
