"""What the benchmarks (``bench/``) and the tests share to run the real thing,
such as free ports for the servers they start. The product (``lakepubsub``,
``api``, ``jobs``) never imports it (an import-linter contract in pyproject.toml)."""
