"""servekit.sim."""
