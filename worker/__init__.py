"""The build/measure side: compile candidates, run them in a sandbox, report results.

`build`, `measure` and `jobs` import neither the service stack (fastapi, sqlalchemy) nor the
queue (rq, redis), so a bare GPU machine with numpy can build, measure and benchmark from a
plain checkout; only `daemon`, `registry` and `measure_lock`, which serve the RQ queues and
meet in Redis, need rq and redis.
"""
