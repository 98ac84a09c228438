"""The CUDA stage schedules: the `Schedule` interface of `compiler.schedule.stage`, lowering to
loop IR with block and thread bindings (see "GPU concepts" in `compiler.loop.nodes`); the table of
which applies to which stage class is `targets.cuda.compiler`."""
