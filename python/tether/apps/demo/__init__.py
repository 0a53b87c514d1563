"""`tether demo`: the main job on embedded defaults (SQLite, MuJoCo simulation)."""
