//! Reading a patch into operations: every "malformed" rule lives here, once.

use std::borrow::Cow;

use super::engine::Failure;
use super::{Mode, PatchError, PatchWarning};
use crate::pointer::Pointer;

/// The six RFC 6902 operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    Add,
    Remove,
    Replace,
    Move,
    Copy,
    Test,
}

impl OpKind {
    fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "add" => OpKind::Add,
            "remove" => OpKind::Remove,
            "replace" => OpKind::Replace,
            "move" => OpKind::Move,
            "copy" => OpKind::Copy,
            "test" => OpKind::Test,
            _ => return None,
        })
    }

    fn needs_value(self) -> bool {
        matches!(self, OpKind::Add | OpKind::Replace | OpKind::Test)
    }

    fn needs_from(self) -> bool {
        matches!(self, OpKind::Move | OpKind::Copy)
    }
}

/// One parsed operation; `L` is the representation's patch literal.
#[derive(Clone, Debug)]
pub struct Op<L> {
    /// Position in the patch array (dropped AG-UI operations keep their numbering).
    pub index: usize,
    pub kind: OpKind,
    pub path: Pointer,
    pub path_text: String,
    pub from: Option<Pointer>,
    pub value: Option<L>,
}

/// A member of an operation object, as a representation sees it.
pub enum Field<'s> {
    Absent,
    Str(Cow<'s, str>),
    /// Present but not a string.
    Other,
}

/// One element of the patch array, in some representation.
pub trait OpSource {
    type Lit;
    type Fault;
    /// True when the element is a JSON object.
    fn is_object(&self) -> Result<bool, Self::Fault>;
    /// The member `name` as text.
    fn text(&self, name: &str) -> Result<Field<'_>, Self::Fault>;
    /// The member `name` as a literal value (`null` is present).
    fn literal(&self, name: &str) -> Result<Option<Self::Lit>, Self::Fault>;
}

/// Parse every element before anything is applied, so a malformed patch is reported as such
/// whatever the document.
///
/// The warnings of dropped operations (AG-UI mode) are pushed onto `warnings` as they are met,
/// so the caller keeps them, in order, whatever happens next: a later malformed operation here,
/// or a failure while applying.
pub fn parse_ops<S: OpSource>(
    items: impl IntoIterator<Item = S>,
    mode: Mode,
    warnings: &mut Vec<PatchWarning>,
) -> Result<Vec<Op<S::Lit>>, Failure<S::Fault>> {
    let mut ops = Vec::new();
    for (index, item) in items.into_iter().enumerate() {
        let fault = |fault| Failure::Fault {
            fault,
            op_index: Some(index),
            path: None,
        };
        let bad = |path: Option<&str>, code: &'static str, message: String| {
            Failure::Patch(PatchError::malformed(Some(index), path, code, message))
        };
        if !item.is_object().map_err(fault)? {
            return Err(bad(
                None,
                "op_not_object",
                "an operation must be a JSON object".to_owned(),
            ));
        }
        // Read `path` first so errors about `op` can still name it.
        let path_field = item.text("path").map_err(fault)?;
        let p = match &path_field {
            Field::Str(text) => Some(text.as_ref()),
            _ => None,
        };
        let kind = match item.text("op").map_err(fault)? {
            Field::Str(name) => match OpKind::from_name(&name) {
                Some(kind) => kind,
                None if mode == Mode::AgUi => {
                    warnings.push(PatchWarning {
                        op_index: index,
                        code: "unknown_op",
                        message: format!("unknown op {name:?} dropped"),
                    });
                    continue;
                }
                None => return Err(bad(p, "unknown_op", format!("unknown op {name:?}"))),
            },
            Field::Absent => {
                return Err(bad(p, "missing_member", "missing member 'op'".to_owned()))
            }
            Field::Other => {
                return Err(bad(
                    p,
                    "member_not_string",
                    "member 'op' must be a string".to_owned(),
                ))
            }
        };
        let path_text = match path_field {
            Field::Str(text) => text.into_owned(),
            Field::Absent => {
                return Err(bad(
                    None,
                    "missing_member",
                    "missing member 'path'".to_owned(),
                ))
            }
            Field::Other => {
                let msg = "member 'path' must be a string".to_owned();
                return Err(bad(None, "member_not_string", msg));
            }
        };
        let p = Some(path_text.as_str());
        let path = Pointer::parse(&path_text)
            .map_err(|e| bad(p, "bad_pointer", format!("bad pointer in 'path': {e}")))?;
        let from = if kind.needs_from() {
            let text = match item.text("from").map_err(fault)? {
                Field::Str(f) => f,
                Field::Absent => {
                    return Err(bad(p, "missing_member", "missing member 'from'".to_owned()))
                }
                Field::Other => {
                    let msg = "member 'from' must be a string".to_owned();
                    return Err(bad(p, "member_not_string", msg));
                }
            };
            let from = Pointer::parse(&text)
                .map_err(|e| bad(p, "bad_pointer", format!("bad pointer in 'from': {e}")))?;
            // A `move` into the value's own child is well formed; the engine refuses to apply
            // it (`move_into_child`), as RFC 6902 4.4 and the AG-UI draft read it.
            Some(from)
        } else {
            None
        };
        let value = if kind.needs_value() {
            let located = |fault| Failure::Fault {
                fault,
                op_index: Some(index),
                path: Some(path_text.clone()),
            };
            match item.literal("value").map_err(located)? {
                Some(v) => Some(v),
                None => {
                    return Err(bad(
                        p,
                        "missing_member",
                        "missing member 'value'".to_owned(),
                    ))
                }
            }
        } else {
            None
        };
        ops.push(Op {
            index,
            kind,
            path,
            path_text,
            from,
            value,
        });
    }
    Ok(ops)
}
