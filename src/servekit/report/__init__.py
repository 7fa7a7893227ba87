"""servekit.report."""
