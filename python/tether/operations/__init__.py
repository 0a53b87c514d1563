"""The provider operations journal: one record of provider facts per operation id, for every
adapter (simulation, DYNAMIXEL; Modbus and gRPC later). It records facts and decides nothing:
the Activity catalog holds the control state."""

from tether.operations._errors import JOURNAL_ERROR_CODES, JournalError
from tether.operations._journal import (
    OPERATION_ID,
    STATES,
    Journal,
    Operation,
    canonical_json,
    check_operation_id,
    digest_of,
)

__all__ = [
    "JOURNAL_ERROR_CODES",
    "OPERATION_ID",
    "STATES",
    "Journal",
    "JournalError",
    "Operation",
    "canonical_json",
    "check_operation_id",
    "digest_of",
]
