"""servekit.render."""
