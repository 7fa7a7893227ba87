"""servekit.local."""
