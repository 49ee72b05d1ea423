"""One adapter per contender, all with the CLI of ``bench.adapters.common.parse_args``."""
