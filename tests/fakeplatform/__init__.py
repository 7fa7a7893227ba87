"""A fake ModelArts platform and a normalizer of launch commands, for fidelity tests.

``harness`` runs a node's launch entry against a fake rank table, fake
``hostname``/``ifconfig``/``ip`` and a recording ``vllm``; ``normalize`` turns each
recorded (argv, env, cwd) into comparable facts; ``compare`` diffs two fact sets.
"""
