//! JSON Patch (RFC 6902): one engine, generic over the document representation.
//!
//! Pure: no I/O, no clock, no Python. `ops.rs` parses a patch into operations (the malformed
//! rules), `engine.rs` applies them atomically through an undo journal (the does-not-apply
//! rules), `diff.rs` produces a patch between two documents, and `tree.rs` is the trait a
//! document representation implements; `value.rs` implements it for `serde_json::Value`.
//! The Python-object implementation lives in `crate::bindings::patch`.

mod diff;
mod engine;
mod ops;
mod tree;
mod value;

use std::fmt;

pub use diff::{diff, DiffSink};
pub use engine::{run, Failure};
pub use ops::{parse_ops, Field, Op, OpKind, OpSource};
pub use tree::{Node, Shape, Tree};
pub use value::{diff_value, json_equal, ValueDoc};

/// How strictly a patch is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Mode {
    /// RFC 6902: an unknown `op` makes the patch malformed.
    #[default]
    Strict,
    /// AG-UI: an operation with an unknown `op` is dropped with a warning, the rest applies.
    AgUi,
}

/// Something the engine tolerated (AG-UI mode only).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PatchWarning {
    pub op_index: usize,
    /// Stable snake_case code; see [`WARNING_CODES`].
    pub code: &'static str,
    pub message: String,
}

/// Every warning code the engine can emit.
pub const WARNING_CODES: &[&str] = &["unknown_op"];

/// The two failures a caller must tell apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchErrorKind {
    /// Not a patch: not an array, an operation that is not an object, a missing or wrongly
    /// typed member, bad pointer syntax, an unknown `op` (strict).
    Malformed,
    /// A well-formed patch that does not apply to this document: a missing path, an index out
    /// of range, a failed `test`, a `move` into the value's own child.
    DoesNotApply,
}

/// Why a patch was refused. On this error the document is exactly as it was before.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PatchError {
    pub kind: PatchErrorKind,
    /// Index of the failing operation in the patch array; `None` when the patch is not an array.
    pub op_index: Option<usize>,
    /// The failing operation's `path` member, when it has a string one.
    pub path: Option<String>,
    pub message: String,
    /// Stable snake_case reason; see [`ERROR_CODES`].
    pub code: &'static str,
    /// The operations dropped (AG-UI mode) before the patch failed, in order: enforcement comes
    /// before application, so their warnings stand whatever happened to the rest.
    pub warnings: Vec<PatchWarning>,
}

/// Every [`PatchError::code`], malformed ones first.
pub const ERROR_CODES: &[&str] = &[
    // Malformed.
    "patch_not_array",
    "op_not_object",
    "missing_member",
    "member_not_string",
    "unknown_op",
    "bad_pointer",
    // Does not apply.
    "move_into_child",
    "member_not_found",
    "index_out_of_range",
    "invalid_index",
    "end_of_array",
    "not_a_container",
    "remove_root",
    "test_failed",
];

impl PatchError {
    pub(crate) fn malformed(
        op_index: Option<usize>,
        path: Option<&str>,
        code: &'static str,
        message: String,
    ) -> Self {
        PatchError {
            kind: PatchErrorKind::Malformed,
            op_index,
            path: path.map(str::to_owned),
            message,
            code,
            warnings: Vec::new(),
        }
    }

    pub(crate) fn does_not_apply(
        op_index: usize,
        path: &str,
        code: &'static str,
        message: String,
    ) -> Self {
        PatchError {
            kind: PatchErrorKind::DoesNotApply,
            op_index: Some(op_index),
            path: Some(path.to_owned()),
            message,
            code,
            warnings: Vec::new(),
        }
    }
}

impl fmt::Display for PatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.op_index, &self.path) {
            (Some(i), Some(p)) => write!(f, "operation {i} (path {p:?}): {}", self.message),
            (Some(i), None) => write!(f, "operation {i}: {}", self.message),
            _ => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for PatchError {}

/// Apply `patch` to `doc` in place. Atomic: on `Err` the document is exactly as before.
///
/// Returns the warnings of AG-UI mode (always empty in strict mode); on `Err` the error
/// carries the warnings of the operations dropped before the failure.
pub fn apply_value(
    doc: &mut serde_json::Value,
    patch: &serde_json::Value,
    mode: Mode,
) -> Result<Vec<PatchWarning>, PatchError> {
    let Some(items) = patch.as_array() else {
        return Err(PatchError::malformed(
            None,
            None,
            "patch_not_array",
            "a patch must be a JSON array of operations".to_owned(),
        ));
    };
    let mut warnings = Vec::new();
    let result = parse_ops(items.iter(), mode, &mut warnings)
        .and_then(|ops| run(&mut ValueDoc::new(doc), &ops, true));
    match result {
        Ok(()) => Ok(warnings),
        Err(f) => {
            let mut e = f.into_patch_error();
            e.warnings = warnings;
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests;
