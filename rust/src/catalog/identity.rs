//! Derived identities: the provider operation id and the settlement evidence digest.
//!
//! Both hash canonical JSON (an object with sorted keys, no whitespace, serde_json string
//! escaping) with SHA-256, so any implementation that writes the same canonical form agrees.

use sha2::{Digest, Sha256};

/// Canonical JSON of string fields; `fields` must already be sorted by name.
pub(crate) fn canonical_json(fields: &[(&str, &str)]) -> String {
    debug_assert!(
        fields.windows(2).all(|w| w[0].0 < w[1].0),
        "fields must be sorted"
    );
    let mut out = String::from("{");
    for (i, (name, value)) in fields.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        // Serialising a &str cannot fail.
        out.push_str(&serde_json::to_string(name).unwrap_or_default());
        out.push(':');
        out.push_str(&serde_json::to_string(value).unwrap_or_default());
    }
    out.push('}');
    out
}

pub(crate) fn sha256_hex(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// The stable provider operation identity of an activity: namespaced by kind and world, so equal
/// family-local activity ids in two worlds or two kinds never share one.
pub fn operation_id_for(kind: &str, world_id: &str, activity_id: &str) -> String {
    let json = canonical_json(&[
        ("activity_id", activity_id),
        ("kind", kind),
        ("namespace", "tether.activity.operation.v1"),
        ("world_id", world_id),
    ]);
    format!("tether-op-v1:{}", sha256_hex(&json))
}

/// The completion evidence digest that settles an activity: it binds the kind, world and
/// activity id to the exact recorded result reference and digest.
pub fn settlement_evidence_digest(
    kind: &str,
    world_id: &str,
    activity_id: &str,
    result_ref: &str,
    result_digest: &str,
) -> String {
    let json = canonical_json(&[
        ("activity_id", activity_id),
        ("kind", kind),
        ("namespace", "tether.activity.settlement.v1"),
        ("result_digest", result_digest),
        ("result_ref", result_ref),
        ("world_id", world_id),
    ]);
    format!("sha256:{}", sha256_hex(&json))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_json_escapes_and_sorts() {
        assert_eq!(
            canonical_json(&[("a", "x\"y"), ("b", "é")]),
            "{\"a\":\"x\\\"y\",\"b\":\"é\"}"
        );
    }

    #[test]
    fn operation_ids_are_namespaced_by_world_and_kind() {
        let base = operation_id_for("sim.rollout", "w1", "a");
        assert_eq!(base, operation_id_for("sim.rollout", "w1", "a"));
        assert_ne!(base, operation_id_for("sim.rollout", "w2", "a"));
        assert_ne!(base, operation_id_for("robot.move", "w1", "a"));
        // Field boundaries cannot be shifted: ("w:1","a") differs from ("w","1:a").
        assert_ne!(
            operation_id_for("k", "w:1", "a"),
            operation_id_for("k", "w", "1:a")
        );
        assert!(base.starts_with("tether-op-v1:"));
        assert_eq!(base.len(), "tether-op-v1:".len() + 64);
    }

    #[test]
    fn evidence_digest_binds_every_field() {
        let d = settlement_evidence_digest("k", "w", "a", "r", "d");
        assert_ne!(d, settlement_evidence_digest("k2", "w", "a", "r", "d"));
        assert_ne!(d, settlement_evidence_digest("k", "w", "a", "r2", "d"));
        assert_ne!(d, settlement_evidence_digest("k", "w", "a", "r", "d2"));
    }
}
