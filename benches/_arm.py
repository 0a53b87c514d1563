"""The benches' host.toml for the two-joint arm on an emulated DYNAMIXEL bus (`a` id 1, `b` id 2,
±1.5 rad), with the principals and `[serve]` table each bench adds."""

from __future__ import annotations

from pathlib import Path


def arm_config(
    state: Path,
    url: str,
    *,
    safe_stop: str = "hold",
    speed: float | None = None,
    principals: str = "",
    serve: str = "",
) -> str:
    """The host.toml text: `[host]`, `principals` (TOML tables), the bus, the arm and `serve`
    (a `[serve]` table, or nothing)."""
    speeds = "" if speed is None else f"speed = {speed}\nfirst_motion_speed = {speed}\n"
    joints = "".join(
        f'[[robots.arm.joints]]\nname = "{name}"\nid = {dxl_id}\nmin = -1.5\nmax = 1.5\n'
        for name, dxl_id in (("a", 1), ("b", 2))
    )
    return (
        f'[host]\nstate_dir = "{state}"\n{principals}'
        f'[ports.bus]\nurl = "{url}"\ntimeout_ms = 400\n'
        f'[robots.arm]\nport = "bus"\nsafe_stop = "{safe_stop}"\n{speeds}{joints}{serve}'
    )
