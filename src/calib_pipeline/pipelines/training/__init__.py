"""One training node per (method, seed), namespaced by method."""
