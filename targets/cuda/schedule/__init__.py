"""CUDA's own stage templates, those that need its instructions: WMMA and wgmma tensor cores,
the `cp.async` pipeline (`staging`) and tiles (`async_tiles`), the copy engine (`tma`). They
implement the `Schedule` interface of `compiler.schedule.stage`, lowering to loop IR with
block and thread bindings (see "GPU concepts" in `compiler.loop.nodes`); the GPU templates
any GPU kind lists are `targets.gpu.schedule`, and the list of each stage class's templates is
`targets.cuda.compiler`."""
