"""DYNAMIXEL Protocol 2.0 adapter: host configuration, the serial driver, the X-series table."""
