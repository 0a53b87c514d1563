"""What a seeded episode request costs in memory, and the cap a request is refused past.

Pure (no file, clock or simulator): the family's admission check, which runs in the
required projector, and the provider's own check after a claim both use it.
"""

from __future__ import annotations

from typing import Final

from tether.families.sim._episode import EpisodeRequest
from tether.families.sim.errors import InvalidEpisodeRequest, RequestTooLarge

#: Bytes an episode step costs while it runs and while its result file is encoded: the
#: preallocated arrays (qpos, qvel, ctrl, tip: 2 float64 each; error: 1), the noise drawn per
#: episode, and the encoded result held in memory (the arrays again, twice: the `.npy` bytes
#: and the zip buffer).
BYTES_PER_STEP: Final = 3 * (4 * 2 + 1) * 8 + 2 * 8
#: Fixed cost of one request beyond its steps (the interpreter, MuJoCo's model and data).
BYTES_PER_REQUEST: Final = 64 << 20
#: The default memory cap of one attempt (1 GiB): 3.3 million steps over all episodes.
DEFAULT_MEMORY_CAP_BYTES: Final = 1 << 30


def mib(n: int) -> str:
    """`n` bytes in MiB for messages: whole when it is, else to 0.1 MiB rounded up (so an
    estimate just past a whole cap never reads as equal to it)."""
    if n % (1 << 20) == 0:
        return str(n >> 20)
    tenths = -(-n * 10 // (1 << 20))
    return f"{tenths // 10}.{tenths % 10}"


def check_cap(cap_bytes: object) -> int:
    """`cap_bytes` as a memory cap, refused (`InvalidEpisodeRequest`) unless it is an integer
    number of bytes past the fixed cost of a request (at that cost itself no reach could run:
    every one would be refused)."""
    if isinstance(cap_bytes, bool) or not isinstance(cap_bytes, int):
        raise InvalidEpisodeRequest("memory_cap_bytes must be an integer number of bytes")
    if cap_bytes <= BYTES_PER_REQUEST:
        raise InvalidEpisodeRequest(
            f"memory_cap_bytes must be more than {BYTES_PER_REQUEST} ({mib(BYTES_PER_REQUEST)}"
            f" MiB, a request's fixed cost: under it no reach could run), got {cap_bytes}"
        )
    return cap_bytes


def estimated_memory_bytes(request: EpisodeRequest) -> int:
    """What running `request` and encoding its result file costs in memory, at most."""
    return BYTES_PER_REQUEST + request.episodes * request.steps * BYTES_PER_STEP


def check_memory(request: EpisodeRequest, cap_bytes: int) -> None:
    """Refuse `request` (`RequestTooLarge`) if it would need more than `cap_bytes`."""
    need = estimated_memory_bytes(request)
    if need > cap_bytes:
        amounts = (f"{mib(need)} MiB", f"{mib(cap_bytes)} MiB")
        if amounts[0] == amounts[1]:  # too close to tell apart in MiB
            amounts = (f"{need} bytes", f"{cap_bytes} bytes")
        raise RequestTooLarge(
            "request_too_large",
            f"{request.episodes} episodes x {request.steps} steps need about "
            f"{amounts[0]} of memory, over the cap of {amounts[1]}; "
            "run fewer episodes or steps per reach, or raise the cap",
            details={
                "episodes": request.episodes,
                "steps": request.steps,
                "bytes_per_step": BYTES_PER_STEP,
                "estimated_bytes": need,
                "cap_bytes": cap_bytes,
            },
        )
