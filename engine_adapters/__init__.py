"""engine_adapters package."""
