"""Device emulators that speak the real wire protocol over a pty (for tests and demos)."""
