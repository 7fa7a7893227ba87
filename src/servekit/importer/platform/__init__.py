"""A fake ModelArts platform and a normalizer of launch commands.

``harness`` runs a node's launch entry against a fake rank table, fake
``hostname``/``ifconfig``/``ip``/``sysctl`` and a recording ``vllm``; ``normalize``
turns each recorded (argv, env, cwd) into comparable facts; ``compare`` diffs two
fact sets; ``fixture`` reads and writes them as JSON. The importer runs a source
folder on it (contained); the render tests run servekit's own rendered entries.
"""
