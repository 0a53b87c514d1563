//! Completion evidence: the family's proof, committed in the observation tick, that binds the
//! Activity kind and id to the exact recorded result and proves its complete fact set present.
//!
//! Written once, here: `completion_evidence` builds the evidence component and
//! `verify_completion` checks it against a committed snapshot; both use one `facts_digest` and
//! the `settlement_evidence_digest` that `settle` then requires. Pure: facts cross as the
//! canonical JSON texts the world stores, the snapshot as a lookup function; nothing is read.

use serde_json::{Map, Value};

use super::identity::{settlement_evidence_digest, sha256_hex};
use super::record::{Key, ResultRef};

/// One staged fact: an entity's component and its value as canonical JSON text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fact<'a> {
    pub entity: &'a str,
    pub component: &'a str,
    pub value: &'a str,
}

/// Why evidence is not completion evidence for an activity's recorded result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompletionMismatch {
    /// The tick being checked did not write the evidence component.
    NotWrittenInTick,
    /// The evidence is not an object with the expected string fields and fact list.
    Malformed,
    /// It binds another kind, id, result reference or digest.
    WrongBinding,
    /// A listed fact is absent from the snapshot.
    FactMissing,
    /// The listed facts are present but their digest is not the bound one.
    FactsDigestMismatch,
    /// `completion_evidence` was given one (entity, component) twice.
    DuplicateFact,
}

impl CompletionMismatch {
    pub const ALL: [CompletionMismatch; 6] = [
        CompletionMismatch::NotWrittenInTick,
        CompletionMismatch::Malformed,
        CompletionMismatch::WrongBinding,
        CompletionMismatch::FactMissing,
        CompletionMismatch::FactsDigestMismatch,
        CompletionMismatch::DuplicateFact,
    ];

    pub fn code(self) -> &'static str {
        match self {
            CompletionMismatch::NotWrittenInTick => "not_written_in_tick",
            CompletionMismatch::Malformed => "malformed",
            CompletionMismatch::WrongBinding => "wrong_binding",
            CompletionMismatch::FactMissing => "fact_missing",
            CompletionMismatch::FactsDigestMismatch => "facts_digest_mismatch",
            CompletionMismatch::DuplicateFact => "duplicate_fact",
        }
    }
}

fn json_str(s: &str) -> String {
    // Serialising a &str cannot fail.
    serde_json::to_string(s).unwrap_or_default()
}

/// Digest of a complete fact set: canonical JSON of the `[entity, component, value]` triples
/// sorted by (entity, component), SHA-256, `sha256:` prefixed. Values are embedded as given
/// (already canonical), so no value is re-encoded.
pub fn facts_digest(facts: &[Fact<'_>]) -> String {
    let mut sorted: Vec<&Fact<'_>> = facts.iter().collect();
    sorted.sort_by(|a, b| (a.entity, a.component, a.value).cmp(&(b.entity, b.component, b.value)));
    let mut out = String::from("[");
    for (i, f) in sorted.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('[');
        out.push_str(&json_str(f.entity));
        out.push(',');
        out.push_str(&json_str(f.component));
        out.push(',');
        out.push_str(f.value);
        out.push(']');
    }
    out.push(']');
    format!("sha256:{}", sha256_hex(&out))
}

/// The completion evidence of `result` for `key` with its complete fact set, as canonical JSON
/// text (sorted keys, no whitespace): the settlement binding, the kind, id, result reference and
/// digest, the sorted fact keys and the fact-set digest.
pub fn completion_evidence(
    key: &Key,
    result: &ResultRef,
    facts: &[Fact<'_>],
) -> Result<String, CompletionMismatch> {
    let mut keys: Vec<(&str, &str)> = facts.iter().map(|f| (f.entity, f.component)).collect();
    keys.sort_unstable();
    if keys.windows(2).any(|w| w[0] == w[1]) {
        return Err(CompletionMismatch::DuplicateFact);
    }
    let binding = settlement_evidence_digest(
        &key.kind,
        &key.world_id,
        &key.activity_id,
        &result.result_ref,
        &result.digest,
    );
    let listed: Vec<Value> = keys
        .iter()
        .map(|(e, c)| Value::Array(vec![Value::from(*e), Value::from(*c)]))
        .collect();
    // Inserted in sorted key order: with `preserve_order` that is the serialised order.
    let mut obj = Map::new();
    obj.insert("activity_id".into(), Value::from(key.activity_id.as_str()));
    obj.insert("binding".into(), Value::from(binding));
    obj.insert("facts".into(), Value::Array(listed));
    obj.insert("facts_digest".into(), Value::from(facts_digest(facts)));
    obj.insert("kind".into(), Value::from(key.kind.as_str()));
    obj.insert("result_digest".into(), Value::from(result.digest.as_str()));
    obj.insert("result_ref".into(), Value::from(result.result_ref.as_str()));
    Ok(Value::Object(obj).to_string())
}

/// The settlement evidence digest if `evidence` (the evidence component's JSON text, None when
/// absent) is completion evidence of `result` for `key`: written by exactly the tick being
/// checked (`written_in_tick`), binding this kind, id, result reference and digest, and listing
/// facts that `lookup(entity, component)` finds with the bound fact-set digest.
pub fn verify_completion(
    key: &Key,
    result: &ResultRef,
    evidence: Option<&str>,
    written_in_tick: bool,
    mut lookup: impl FnMut(&str, &str) -> Option<String>,
) -> Result<String, CompletionMismatch> {
    if !written_in_tick {
        return Err(CompletionMismatch::NotWrittenInTick);
    }
    let evidence = evidence.ok_or(CompletionMismatch::NotWrittenInTick)?;
    let Ok(Value::Object(ev)) = serde_json::from_str::<Value>(evidence) else {
        return Err(CompletionMismatch::Malformed);
    };
    let text = |name: &str| ev.get(name).and_then(Value::as_str);
    let binding = settlement_evidence_digest(
        &key.kind,
        &key.world_id,
        &key.activity_id,
        &result.result_ref,
        &result.digest,
    );
    let bound = [
        ("binding", binding.as_str()),
        ("kind", key.kind.as_str()),
        ("activity_id", key.activity_id.as_str()),
        ("result_ref", result.result_ref.as_str()),
        ("result_digest", result.digest.as_str()),
    ];
    for (name, expected) in bound {
        match text(name) {
            Some(v) if v == expected => {}
            Some(_) => return Err(CompletionMismatch::WrongBinding),
            None => return Err(CompletionMismatch::Malformed),
        }
    }
    let Some(Value::Array(listed)) = ev.get("facts") else {
        return Err(CompletionMismatch::Malformed);
    };
    let Some(bound_digest) = text("facts_digest") else {
        return Err(CompletionMismatch::Malformed);
    };
    let mut found: Vec<(String, String, String)> = Vec::with_capacity(listed.len());
    for pair in listed {
        let (Some(entity), Some(component)) = (
            pair.get(0).and_then(Value::as_str),
            pair.get(1).and_then(Value::as_str),
        ) else {
            return Err(CompletionMismatch::Malformed);
        };
        if pair.as_array().map(Vec::len) != Some(2) {
            return Err(CompletionMismatch::Malformed);
        }
        let value = lookup(entity, component).ok_or(CompletionMismatch::FactMissing)?;
        found.push((entity.to_owned(), component.to_owned(), value));
    }
    let facts: Vec<Fact<'_>> = found
        .iter()
        .map(|(e, c, v)| Fact {
            entity: e,
            component: c,
            value: v,
        })
        .collect();
    if facts_digest(&facts) != bound_digest {
        return Err(CompletionMismatch::FactsDigestMismatch);
    }
    Ok(binding)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::scenario_tests::result_ref;
    use std::collections::HashMap;

    fn key(id: &str) -> Key {
        Key {
            world_id: "w".into(),
            kind: "k".into(),
            activity_id: id.into(),
        }
    }

    fn fact<'a>(entity: &'a str, component: &'a str, value: &'a str) -> Fact<'a> {
        Fact {
            entity,
            component,
            value,
        }
    }

    #[test]
    fn facts_digest_sorts_and_embeds_values_as_given() {
        let a = [fact("e2", "c", "1"), fact("e1", "c", "{\"x\":[1,2]}")];
        let b = [a[1], a[0]];
        assert_eq!(facts_digest(&a), facts_digest(&b));
        let expected = format!(
            "sha256:{}",
            sha256_hex("[[\"e1\",\"c\",{\"x\":[1,2]}],[\"e2\",\"c\",1]]")
        );
        assert_eq!(facts_digest(&a), expected);
        assert_ne!(
            facts_digest(&a),
            facts_digest(&[fact("e2", "c", "2"), a[1]])
        );
    }

    #[test]
    fn evidence_verifies_against_its_facts_and_nothing_else() {
        let r = result_ref("r");
        let facts = [fact("t1", "status", "\"done\""), fact("t1", "value", "2")];
        let ev = completion_evidence(&key("a"), &r, &facts).unwrap();
        let state: HashMap<(String, String), String> = facts
            .iter()
            .map(|f| ((f.entity.into(), f.component.into()), f.value.into()))
            .collect();
        let lookup = |s: &HashMap<(String, String), String>| {
            let s = s.clone();
            move |e: &str, c: &str| s.get(&(e.to_owned(), c.to_owned())).cloned()
        };
        let binding = settlement_evidence_digest("k", "w", "a", "r", "sha256:r");
        assert_eq!(
            verify_completion(&key("a"), &r, Some(&ev), true, lookup(&state)),
            Ok(binding)
        );
        let check = |k: &Key, r: &ResultRef, ev: &str, written: bool, s: &HashMap<_, _>| {
            verify_completion(k, r, Some(ev), written, lookup(s)).unwrap_err()
        };
        use CompletionMismatch::*;
        assert_eq!(check(&key("a"), &r, &ev, false, &state), NotWrittenInTick);
        assert_eq!(check(&key("b"), &r, &ev, true, &state), WrongBinding);
        assert_eq!(
            check(&key("a"), &result_ref("x"), &ev, true, &state),
            WrongBinding
        );
        assert_eq!(check(&key("a"), &r, "[1]", true, &state), Malformed);
        assert_eq!(check(&key("a"), &r, "{", true, &state), Malformed);
        let mut missing = state.clone();
        missing.remove(&("t1".to_owned(), "value".to_owned()));
        assert_eq!(check(&key("a"), &r, &ev, true, &missing), FactMissing);
        let mut changed = state.clone();
        changed.insert(("t1".into(), "value".into()), "3".into());
        assert_eq!(
            check(&key("a"), &r, &ev, true, &changed),
            FactsDigestMismatch
        );
        assert_eq!(
            completion_evidence(&key("a"), &r, &[facts[0], facts[0]]).unwrap_err(),
            DuplicateFact
        );
    }
}
