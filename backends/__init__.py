"""The package of xloss backends (installed as ``xloss.backends``).

Each subpackage is one self-contained backend (adapter, and for C backends the sources,
headers and build script). They are registered through the ``xloss.backends`` entry-point
group declared in ``pyproject.toml``, the same way an out-of-tree port registers; see
:mod:`xloss.registry`.
"""
