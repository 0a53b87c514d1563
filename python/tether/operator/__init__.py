"""Operator intervention: parked robot moves, their evidence, decisions, and `tether stop`."""
