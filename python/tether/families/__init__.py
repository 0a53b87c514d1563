"""Activity families: each one's components, projection, staging, and its runtime adapter.

`sim` is `physical_ai.sim_episode` (seeded MuJoCo reaches); `robot_move` is
`physical_ai.robot_move` (multi-joint moves of a real robot through a device adapter).
"""
