"""The GPU stage schedules every GPU kind may list: the `Schedule` interface of
`compiler.schedule.stage`, lowering to loop IR with block and thread bindings (see "GPU
concepts" in `compiler.loop.nodes`). Which a kind lists for which stage class is its
`compiler.py`."""
