//! Field bounds: the catalog stores bounded references, never payloads.

use super::rejection::{Rejection, RejectionKind};

/// World, activity, run, owner, operator ids and visibility tokens.
pub const MAX_ID_BYTES: usize = 512;
pub const MAX_KIND_BYTES: usize = 255;
/// Input, result, retry-guard and evidence references; media types use the kind bound.
pub const MAX_REF_BYTES: usize = 4096;
pub const MAX_DIGEST_BYTES: usize = 255;
pub const MAX_OPERATION_ID_BYTES: usize = 1024;
/// Operator notes.
pub const MAX_NOTE_BYTES: usize = 4096;
/// Leases are at most 7 days; a longer lease would strand work behind a dead worker.
pub const MAX_LEASE_MS: i64 = 7 * 24 * 3600 * 1000;
/// A reconciliation backoff (`record_unknown`'s `retry_after_ms`) is at most 7 days too.
pub const MAX_RETRY_AFTER_MS: i64 = 7 * 24 * 3600 * 1000;

fn bounded(
    field: &'static str,
    value: &str,
    max: usize,
    allow_empty: bool,
) -> Result<(), Rejection> {
    if value.is_empty() && !allow_empty {
        return Err(Rejection::on(
            RejectionKind::BoundsExceeded,
            field,
            "must not be empty",
        ));
    }
    if value.len() > max {
        return Err(Rejection::on(
            RejectionKind::BoundsExceeded,
            field,
            format!("{} bytes exceeds the bound of {max}", value.len()),
        ));
    }
    if value.contains('\0') {
        return Err(Rejection::on(
            RejectionKind::BoundsExceeded,
            field,
            "must not contain NUL",
        ));
    }
    Ok(())
}

pub(crate) fn id(field: &'static str, value: &str) -> Result<(), Rejection> {
    bounded(field, value, MAX_ID_BYTES, false)
}

/// An id that may be empty (meaning "none"): a bound host.
pub(crate) fn optional_id(field: &'static str, value: &str) -> Result<(), Rejection> {
    bounded(field, value, MAX_ID_BYTES, true)
}

pub(crate) fn kind(field: &'static str, value: &str) -> Result<(), Rejection> {
    bounded(field, value, MAX_KIND_BYTES, false)
}

pub(crate) fn reference(field: &'static str, value: &str) -> Result<(), Rejection> {
    bounded(field, value, MAX_REF_BYTES, false)
}

pub(crate) fn digest(field: &'static str, value: &str) -> Result<(), Rejection> {
    bounded(field, value, MAX_DIGEST_BYTES, false)
}

pub(crate) fn operation_id(value: &str) -> Result<(), Rejection> {
    bounded("operation_id", value, MAX_OPERATION_ID_BYTES, false)
}

pub(crate) fn note(value: &str) -> Result<(), Rejection> {
    bounded("note", value, MAX_NOTE_BYTES, true)
}

pub(crate) fn non_negative(field: &'static str, value: i64) -> Result<(), Rejection> {
    if value < 0 {
        return Err(Rejection::on(
            RejectionKind::BoundsExceeded,
            field,
            "must not be negative",
        ));
    }
    Ok(())
}

pub(crate) fn duration(
    field: &'static str,
    value: i64,
    min: i64,
    max: i64,
) -> Result<(), Rejection> {
    if value < min || value > max {
        return Err(Rejection::on(
            RejectionKind::BoundsExceeded,
            field,
            format!("{value} ms is outside {min}..={max}"),
        ));
    }
    Ok(())
}

/// `now_ms + delta_ms` or a bounds rejection instead of overflow.
pub(crate) fn later(field: &'static str, now_ms: i64, delta_ms: i64) -> Result<i64, Rejection> {
    now_ms
        .checked_add(delta_ms)
        .ok_or_else(|| Rejection::on(RejectionKind::BoundsExceeded, field, "time overflows"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_inclusive_and_reject_empty() {
        assert!(id("world_id", &"a".repeat(MAX_ID_BYTES)).is_ok());
        assert!(id("world_id", &"a".repeat(MAX_ID_BYTES + 1)).is_err());
        assert!(id("world_id", "").is_err());
        assert!(note("").is_ok());
        assert!(kind("kind", "a\0b").is_err());
        assert!(duration("lease_ms", 0, 1, MAX_LEASE_MS).is_err());
        assert!(later("lease_ms", i64::MAX, 1).is_err());
    }

    #[test]
    fn multibyte_text_is_measured_in_bytes() {
        let s = "é".repeat(MAX_KIND_BYTES / 2 + 1);
        assert!(kind("kind", &s).is_err());
    }
}
