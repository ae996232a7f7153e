"""The command-line scripts (benchmarks, training, documentation), a package so the tests can import them."""
