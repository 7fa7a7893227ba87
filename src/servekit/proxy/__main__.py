"""``python -m servekit.proxy``: the proxy process, without the servekit CLI."""

import sys

from servekit.proxy.server import main

sys.exit(main())
