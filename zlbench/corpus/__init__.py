"""Everything about a FlagGems benchmark tree, read without importing it.

- ``tree``        the modules of ``benchmark/``, parsed with ``ast``; layout detection
- ``scan``        test functions, their operator marks, the Benchmark class and shape key
- ``static_eval`` the small evaluator behind the scan (marks inside parametrize, ...)
- ``resolve``     which pytest node measures operator X
- ``shapes``      shape files (``core_shapes.yaml`` and curated ones)
- ``table``       the result table FlagGems prints: title, rows, cells (parse + format)
- ``inventory``, ``collect``   operator inventories and their ``--collect-only`` check
- ``guards``      vendor skip guards in test files and the compat tables that override them

Nothing here imports torch, triton or flag_gems; ``pytest --collect-only`` runs in a
subprocess.
"""
