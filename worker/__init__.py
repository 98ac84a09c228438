"""The build/measure side: compile candidates, run them in a sandbox, report results.

`build`, `measure` and `jobs` import neither the service stack (fastapi, sqlalchemy) nor the
queue (rq, redis), so a bare GPU machine with numpy can build, measure and benchmark from a
plain checkout; only `daemon`, `registry` and `measure_lock`, which serve the RQ queues and
meet in Redis, need rq and redis.
"""

# This folder is `tunehub.worker` (`tunehub/` links to it): loaded by its own name, it would
# be a second copy of every module in it.
if __name__ != "tunehub.worker":
    raise ImportError(f"import it as tunehub.worker, not {__name__}")
