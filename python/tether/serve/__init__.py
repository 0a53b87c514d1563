"""`tether serve`: the robot-host daemon (`tether.serve.daemon`), its `[serve]` configuration
(`tether.serve.config`) and the families it runs (`tether.serve.families`). Clients talk to it
through `tether.client`."""
