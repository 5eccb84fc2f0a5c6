"""What the benchmarks (``bench/``) and the tests share to run the real thing:
free ports, the one moto S3 server launcher, stopping a subprocess. The product
(``lakepubsub``, ``api``, ``jobs``) never imports it (an import-linter contract
in pyproject.toml)."""
