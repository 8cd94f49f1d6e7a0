"""Local runtime: the embedded AWS endpoint, the dev server, its gateway and scheduler."""
