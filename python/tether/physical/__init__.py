"""Physical AI: seeded MuJoCo reaching episodes run as durable, reconcilable activities."""

from tether.physical._episode import (
    RESULT_MEDIA_TYPE,
    ControllerParams,
    EpisodeRequest,
    EpisodeRun,
    decode_result,
    encode_result,
    run_episodes,
    trajectory_digest,
)
from tether.physical._model import DEFAULT_MODEL, available_models, load_model_file
from tether.physical._proc import ProcessIdentity
from tether.physical.provider import (
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
