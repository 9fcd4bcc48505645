"""Cluster backends: network namespaces (root), local processes + proxies, later docker."""
