//! JSON Patch (RFC 6902). Pure: no I/O.
