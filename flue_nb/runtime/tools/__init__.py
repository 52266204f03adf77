"""The six standard sandbox tools, each from a factory any sandbox adapter can reuse."""
