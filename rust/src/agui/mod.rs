//! The AG-UI activity message store. Pure: no I/O, no clock.
