"""Operator intervention: every parked Activity, its evidence, decisions, `tether stop`."""
