"""The dashboard at `/ui`: server-rendered pages over the tuning database and the worker
registry (`views` assembles each page, `templates/` lays it out, `static/` styles it and
refreshes its live parts); `server.api.routes.ui` serves them."""
