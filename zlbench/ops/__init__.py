"""``zlbench ops``: the command over the curated ops/ data (inventories, shape files,
the dismiss list, compat tables). The model of a FlagGems tree lives in zlbench.corpus."""
