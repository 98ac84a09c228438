"""The `tunehub` commands, a module per kind, each listing its own in `COMMANDS` for `client.cli`
to add to its group: reading signatures (`signatures`), tuning on this machine (`local`),
talking to a server (`remote`), running the service's processes (`services`, `admin`), CUDA
candidates (`cuda`), models to task sets (`extract`), moving records (`records`). What they
share is in `common`; how they show tunings, in `summaries`."""
