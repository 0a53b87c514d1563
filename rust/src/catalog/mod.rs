//! The Activity catalog's fencing state machine. Pure: no I/O; time is passed in as `now_ms`.
