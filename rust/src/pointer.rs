//! JSON Pointer (RFC 6901). Pure: no I/O.
