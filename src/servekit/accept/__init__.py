"""servekit.accept."""
