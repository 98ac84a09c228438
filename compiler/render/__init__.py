"""Renderers: loop IR (`compiler.loop.Function`) to source text. `cstyle` is the one C-family
renderer (the helper functions it prints in `helpers`, their math bodies in `cmath`, the
workspace block in `workspaces`); each target kind's dialect of it lives in its folder
(`targets/<kind>/render.py`), and `backend.render` renders in a kind's language."""
