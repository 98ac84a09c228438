"""The `tunehub` commands beyond the local ones in `client.cli`: those that talk to a server
(`remote`) and those that run the service's processes (`services`). `client.cli` adds them to
its group."""
