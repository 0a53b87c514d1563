"""`physical_ai.sim_episode`: seeded MuJoCo reaches as durable, reconcilable Activities."""

from tether._proc import ProcessIdentity
from tether.families.sim._episode import (
    RESULT_MEDIA_TYPE,
    ControllerParams,
    EpisodeRequest,
    EpisodeRun,
    decode_result,
    encode_result,
    run_episodes,
    trajectory_digest,
)
from tether.families.sim._model import DEFAULT_MODEL, available_models, load_model_file
from tether.families.sim.provider import (
    EpisodeOutcome,
    ProvenAbsent,
    ResultFound,
    SimProvider,
    StillUnknown,
)

__all__ = [
    "DEFAULT_MODEL",
    "RESULT_MEDIA_TYPE",
    "ControllerParams",
    "EpisodeOutcome",
    "EpisodeRequest",
    "EpisodeRun",
    "ProcessIdentity",
    "ProvenAbsent",
    "ResultFound",
    "SimProvider",
    "StillUnknown",
    "available_models",
    "decode_result",
    "encode_result",
    "load_model_file",
    "run_episodes",
    "trajectory_digest",
]
