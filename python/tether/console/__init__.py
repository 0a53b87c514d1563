"""The operator console of `tether serve`: an HTTP API and a static page for parked decisions,
device actions and Stop (`tether.console.server`), mounted by the daemon when `[serve] console`
names an address (`tether.console.config`)."""
