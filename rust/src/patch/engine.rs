//! Applying parsed operations: every "does not apply" rule and atomicity live here, once.
//!
//! Each primitive mutation pushes its inverse onto an undo journal; when an operation fails,
//! the journal is replayed backwards, which restores the document exactly (object member order
//! included) without ever copying it up front.

use std::convert::Infallible;

use super::ops::{Op, OpKind};
use super::tree::{Node, Shape, Tree};
use super::PatchError;
use crate::pointer::{parse_index, Index, Pointer};

/// Why applying stopped: a patch error, or a fault of the representation.
#[derive(Debug)]
pub enum Failure<F> {
    Patch(PatchError),
    /// The representation refused (e.g. a Python value that is not JSON); `op_index` and `path`
    /// locate the operation that met it.
    Fault {
        fault: F,
        op_index: Option<usize>,
        path: Option<String>,
    },
}

impl Failure<Infallible> {
    /// For representations that cannot fault.
    pub fn into_patch_error(self) -> PatchError {
        match self {
            Failure::Patch(e) => e,
            Failure::Fault { fault, .. } => match fault {},
        }
    }
}

/// Inside one operation: the document does not allow it (message), or the representation faulted.
enum Miss<F> {
    NoApply(&'static str, String),
    Fault(F),
}

impl<F> From<F> for Miss<F> {
    fn from(fault: F) -> Self {
        Miss::Fault(fault)
    }
}

fn no<T, F>(code: &'static str, message: String) -> Result<T, Miss<F>> {
    Err(Miss::NoApply(code, message))
}

/// The inverse of one primitive mutation. `parent` re-resolves the container at undo time: undo
/// runs in reverse order, so the document is then exactly as it was when the step ran.
enum Undo<'o, V> {
    Root(V),
    ObjSet {
        parent: &'o [String],
        key: &'o str,
        prev: Option<V>,
    },
    /// `value` is `None` for a `move` source: the value is the one the move's add displaces
    /// on undo (the entry just after this one).
    ObjRemoved {
        parent: &'o [String],
        key: &'o str,
        position: usize,
        value: Option<V>,
    },
    ArrInserted {
        parent: &'o [String],
        index: usize,
    },
    ArrRemoved {
        parent: &'o [String],
        index: usize,
        value: Option<V>,
    },
    ArrSet {
        parent: &'o [String],
        index: usize,
        prev: V,
    },
}

/// The array slot a token names. `-` is accepted only where `allow_end` (the last token of an
/// add target); indices follow `0|[1-9][0-9]*` and never overflow.
fn array_slot<F>(token: &str, len: usize, allow_end: bool) -> Result<usize, Miss<F>> {
    match parse_index(token) {
        Index::At(i) if i < len || (allow_end && i == len) => Ok(i),
        Index::At(_) | Index::TooLarge => no(
            "index_out_of_range",
            format!("index {token} is out of range (length {len})"),
        ),
        Index::End if allow_end => Ok(len),
        Index::End => no(
            "end_of_array",
            "'-' names the element after the last, which does not exist".to_owned(),
        ),
        Index::Invalid => no("invalid_index", format!("{token:?} is not an array index")),
    }
}

fn step_into<N: Node>(node: N, token: &str) -> Result<N, Miss<N::Fault>> {
    match node.shape()? {
        Shape::Object => match node.member(token)? {
            Some(child) => Ok(child),
            None => no(
                "member_not_found",
                format!("member {token:?} does not exist"),
            ),
        },
        Shape::Array(len) => {
            let i = array_slot(token, len, false)?;
            match node.element(i)? {
                Some(child) => Ok(child),
                None => no(
                    "index_out_of_range",
                    format!("index {token} is out of range (length {len})"),
                ),
            }
        }
        Shape::Scalar => no(
            "not_a_container",
            format!("cannot look up {token:?} in a scalar"),
        ),
    }
}

fn resolve<N: Node>(mut node: N, tokens: &[String]) -> Result<N, Miss<N::Fault>> {
    for token in tokens {
        node = step_into(node, token)?;
    }
    Ok(node)
}

fn resolve_mut<'a, L, T: Tree<L>>(
    tree: &'a mut T,
    tokens: &[String],
) -> Result<T::NodeMut<'a>, Miss<T::Fault>> {
    let mut node = tree.root_mut();
    for token in tokens {
        node = match T::shape_mut(&node)? {
            Shape::Object => match T::member_mut(node, token)? {
                Some(child) => child,
                None => {
                    return no(
                        "member_not_found",
                        format!("member {token:?} does not exist"),
                    )
                }
            },
            Shape::Array(len) => {
                let i = array_slot(token, len, false)?;
                match T::element_mut(node, i)? {
                    Some(child) => child,
                    None => {
                        return no(
                            "index_out_of_range",
                            format!("index {token} is out of range (length {len})"),
                        )
                    }
                }
            }
            Shape::Scalar => {
                return no(
                    "not_a_container",
                    format!("cannot look up {token:?} in a scalar"),
                )
            }
        };
    }
    Ok(node)
}

/// The undo journal. Disabled when the caller discards the document on failure anyway (the
/// Python copying mode patches a fresh copy).
struct Journal<'o, V> {
    entries: Vec<Undo<'o, V>>,
    enabled: bool,
}

impl<'o, V> Journal<'o, V> {
    fn push(&mut self, entry: Undo<'o, V>) {
        if self.enabled {
            self.entries.push(entry);
        }
    }
}

/// A failed add hands back the value when it was not consumed.
type AddResult<F, V> = Result<(), (Miss<F>, Option<V>)>;

/// Add `value` at `path`. On a failure before the value was placed, it is handed back.
fn add<'o, L, T: Tree<L>>(
    tree: &mut T,
    path: &'o Pointer,
    value: T::Value,
    journal: &mut Journal<'o, T::Value>,
) -> AddResult<T::Fault, T::Value> {
    let Some(key) = path.last() else {
        let prev = tree.replace_root(value);
        journal.push(Undo::Root(prev));
        return Ok(());
    };
    let parent = path.parent_tokens();
    let mut node = match resolve_mut(tree, parent) {
        Ok(node) => node,
        Err(miss) => return Err((miss, Some(value))),
    };
    let shape = match T::shape_mut(&node) {
        Ok(shape) => shape,
        Err(fault) => return Err((Miss::Fault(fault), Some(value))),
    };
    match shape {
        Shape::Object => {
            let prev = T::obj_set(&mut node, key, value).map_err(|f| (Miss::Fault(f), None))?;
            journal.push(Undo::ObjSet { parent, key, prev });
        }
        Shape::Array(len) => {
            let index = match array_slot(key, len, true) {
                Ok(index) => index,
                Err(miss) => return Err((miss, Some(value))),
            };
            T::arr_insert(&mut node, index, value).map_err(|f| (Miss::Fault(f), None))?;
            journal.push(Undo::ArrInserted { parent, index });
        }
        Shape::Scalar => {
            return Err((
                Miss::NoApply("not_a_container", format!("cannot add {key:?} to a scalar")),
                Some(value),
            ))
        }
    }
    Ok(())
}

/// Where a removed value sat, for the journal.
enum Slot<'o> {
    Member {
        parent: &'o [String],
        key: &'o str,
        position: usize,
    },
    Element {
        parent: &'o [String],
        index: usize,
    },
}

impl<'o> Slot<'o> {
    fn undo<V>(self, value: Option<V>) -> Undo<'o, V> {
        match self {
            Slot::Member {
                parent,
                key,
                position,
            } => Undo::ObjRemoved {
                parent,
                key,
                position,
                value,
            },
            Slot::Element { parent, index } => Undo::ArrRemoved {
                parent,
                index,
                value,
            },
        }
    }
}

fn take<'o, L, T: Tree<L>>(
    tree: &mut T,
    path: &'o Pointer,
) -> Result<(Slot<'o>, T::Value), Miss<T::Fault>> {
    let Some(key) = path.last() else {
        return no("remove_root", "cannot remove the whole document".to_owned());
    };
    let parent = path.parent_tokens();
    let mut node = resolve_mut(tree, parent)?;
    match T::shape_mut(&node)? {
        Shape::Object => match T::obj_remove(&mut node, key)? {
            Some((position, value)) => Ok((
                Slot::Member {
                    parent,
                    key,
                    position,
                },
                value,
            )),
            None => no("member_not_found", format!("member {key:?} does not exist")),
        },
        Shape::Array(len) => {
            let index = array_slot(key, len, false)?;
            let value = T::arr_remove(&mut node, index)?;
            Ok((Slot::Element { parent, index }, value))
        }
        Shape::Scalar => no(
            "not_a_container",
            format!("cannot remove {key:?} from a scalar"),
        ),
    }
}

fn replace<'o, L, T: Tree<L>>(
    tree: &mut T,
    path: &'o Pointer,
    value: T::Value,
    journal: &mut Journal<'o, T::Value>,
) -> Result<(), Miss<T::Fault>> {
    let Some(key) = path.last() else {
        let prev = tree.replace_root(value);
        journal.push(Undo::Root(prev));
        return Ok(());
    };
    let parent = path.parent_tokens();
    let mut node = resolve_mut(tree, parent)?;
    match T::shape_mut(&node)? {
        Shape::Object => {
            // A replace must not create the member.
            if !T::obj_contains(&node, key)? {
                return no("member_not_found", format!("member {key:?} does not exist"));
            }
            let prev = T::obj_set(&mut node, key, value)?;
            journal.push(Undo::ObjSet { parent, key, prev });
        }
        Shape::Array(len) => {
            let index = array_slot(key, len, false)?;
            let prev = T::arr_set(&mut node, index, value)?;
            journal.push(Undo::ArrSet {
                parent,
                index,
                prev,
            });
        }
        Shape::Scalar => {
            return no(
                "not_a_container",
                format!("cannot replace {key:?} in a scalar"),
            )
        }
    }
    Ok(())
}

// `parse_ops` guarantees `value` for add/replace/test and `from` for move/copy; an `Op` built
// by hand without them is refused rather than trusted.
fn literal<L, F>(op: &Op<L>) -> Result<&L, Miss<F>> {
    op.value.as_ref().map_or_else(
        || no("missing_member", "operation has no 'value'".to_owned()),
        Ok,
    )
}

fn source<L, F>(op: &Op<L>) -> Result<&Pointer, Miss<F>> {
    op.from.as_ref().map_or_else(
        || no("missing_member", "operation has no 'from'".to_owned()),
        Ok,
    )
}

fn in_from<F>(miss: Miss<F>) -> Miss<F> {
    match miss {
        Miss::NoApply(code, m) => Miss::NoApply(code, format!("'from': {m}")),
        fault => fault,
    }
}

fn apply_op<'o, L, T: Tree<L>>(
    tree: &mut T,
    op: &'o Op<L>,
    journal: &mut Journal<'o, T::Value>,
) -> Result<(), Miss<T::Fault>> {
    match op.kind {
        OpKind::Add => {
            let value = T::import(literal(op)?)?;
            add(tree, &op.path, value, journal).map_err(|(miss, _)| miss)
        }
        OpKind::Replace => {
            let value = T::import(literal(op)?)?;
            replace(tree, &op.path, value, journal)
        }
        OpKind::Remove => {
            let (slot, value) = take(tree, &op.path)?;
            journal.push(slot.undo(Some(value)));
            Ok(())
        }
        OpKind::Test => {
            let node = resolve(tree.root(), op.path.tokens())?;
            if T::equals(&node, literal(op)?)? {
                Ok(())
            } else {
                no("test_failed", "test failed: the value differs".to_owned())
            }
        }
        OpKind::Copy => {
            let value = {
                let node = resolve(tree.root(), source(op)?.tokens()).map_err(in_from)?;
                T::clone_node(&node)?
            };
            add(tree, &op.path, value, journal).map_err(|(miss, _)| miss)
        }
        OpKind::Move => {
            let from = source(op)?;
            if from.is_proper_prefix_of(&op.path) {
                return no(
                    "move_into_child",
                    format!("cannot move {:?} into its own child", from.to_string()),
                );
            }
            if *from == op.path {
                // Moving a value onto itself changes nothing, but the value must exist.
                resolve(tree.root(), from.tokens()).map_err(in_from)?;
                return Ok(());
            }
            let (slot, value) = take(tree, from).map_err(in_from)?;
            if !journal.enabled {
                return add(tree, &op.path, value, journal).map_err(|(miss, _)| miss);
            }
            // The source entry goes first; undoing the add (next entry) hands the value back.
            journal.push(slot.undo(None));
            match add(tree, &op.path, value, journal) {
                Ok(()) => Ok(()),
                Err((miss, back)) => {
                    // The add pushed nothing: give the source entry its value back.
                    if let Some(Undo::ObjRemoved { value, .. } | Undo::ArrRemoved { value, .. }) =
                        journal.entries.last_mut()
                    {
                        *value = back;
                    }
                    Err(miss)
                }
            }
        }
    }
}

/// Undo one step, returning the value it displaced (the carried value for a `move` source).
fn undo_one<L, T: Tree<L>>(
    tree: &mut T,
    entry: Undo<'_, T::Value>,
    carried: Option<T::Value>,
) -> Option<T::Value> {
    // Re-resolution cannot fail: the document is exactly as it was when the step ran. Faults
    // here (a Python MemoryError) leave nothing better to do than carry on undoing.
    match entry {
        Undo::Root(prev) => Some(tree.replace_root(prev)),
        Undo::ObjSet { parent, key, prev } => {
            let mut node = resolve_mut(tree, parent).ok()?;
            match prev {
                Some(prev) => T::obj_set(&mut node, key, prev).ok().flatten(),
                None => T::obj_remove(&mut node, key).ok().flatten().map(|(_, v)| v),
            }
        }
        Undo::ObjRemoved {
            parent,
            key,
            position,
            value,
        } => {
            let value = value.or(carried)?;
            let mut node = resolve_mut(tree, parent).ok()?;
            T::obj_insert_at(&mut node, position, key, value).ok()?;
            None
        }
        Undo::ArrInserted { parent, index } => {
            let mut node = resolve_mut(tree, parent).ok()?;
            T::arr_remove(&mut node, index).ok()
        }
        Undo::ArrRemoved {
            parent,
            index,
            value,
        } => {
            let value = value.or(carried)?;
            let mut node = resolve_mut(tree, parent).ok()?;
            T::arr_insert(&mut node, index, value).ok()?;
            None
        }
        Undo::ArrSet {
            parent,
            index,
            prev,
        } => {
            let mut node = resolve_mut(tree, parent).ok()?;
            T::arr_set(&mut node, index, prev).ok()
        }
    }
}

/// Apply parsed operations to `tree`. With `journal`, a failure rolls the document back to
/// exactly its state before the call; without it the caller must discard the document.
pub fn run<L, T: Tree<L>>(
    tree: &mut T,
    ops: &[Op<L>],
    journal: bool,
) -> Result<(), Failure<T::Fault>> {
    let mut log = Journal {
        entries: Vec::new(),
        enabled: journal,
    };
    for op in ops {
        if let Err(miss) = apply_op(tree, op, &mut log) {
            let mut carried = None;
            for entry in log.entries.into_iter().rev() {
                carried = undo_one(tree, entry, carried);
            }
            return Err(match miss {
                Miss::NoApply(code, message) => Failure::Patch(PatchError::does_not_apply(
                    op.index,
                    &op.path_text,
                    code,
                    message,
                )),
                Miss::Fault(fault) => Failure::Fault {
                    fault,
                    op_index: Some(op.index),
                    path: Some(op.path_text.clone()),
                },
            });
        }
    }
    Ok(())
}
