//! A minimal-ish RFC 6902 patch between two documents, generic over the representation.
//!
//! Objects are compared member by member (removals, then recursion, then additions in the new
//! document's order); arrays lose their common prefix and suffix, then the middle is compared
//! pairwise and the length difference becomes removes or adds (`-` when appending). Scalars and
//! mismatched kinds become one `replace`. Equality here is exact (`true` is not `1`, `1` is not
//! `1.0`), so applying the result reproduces the new document type for type.

use super::tree::{Node, Shape};
use crate::pointer::Pointer;

/// Receives the operations, in order.
pub trait DiffSink<N> {
    type Fault;
    fn add(&mut self, path: &Pointer, value: &N) -> Result<(), Self::Fault>;
    fn remove(&mut self, path: &Pointer) -> Result<(), Self::Fault>;
    fn replace(&mut self, path: &Pointer, value: &N) -> Result<(), Self::Fault>;
}

/// Below this depth subtrees that differ are replaced whole instead of compared further, so
/// the walk's recursion stays bounded whatever the documents.
const MAX_WALK_DEPTH: usize = 256;

/// Emit into `sink` a patch that turns `old` into `new`.
pub fn diff<N: Node, S: DiffSink<N, Fault = N::Fault>>(
    old: &N,
    new: &N,
    sink: &mut S,
) -> Result<(), N::Fault> {
    let mut path = Pointer::root();
    walk(&mut path, old, new, sink, 0)
}

fn walk<N: Node, S: DiffSink<N, Fault = N::Fault>>(
    path: &mut Pointer,
    old: &N,
    new: &N,
    sink: &mut S,
    depth: usize,
) -> Result<(), N::Fault> {
    if depth >= MAX_WALK_DEPTH {
        if !old.same(new)? {
            sink.replace(path, new)?;
        }
        return Ok(());
    }
    match (old.shape()?, new.shape()?) {
        (Shape::Object, Shape::Object) => {
            for (key, before) in old.entries()? {
                path.push(key.as_str());
                match new.member(&key)? {
                    Some(after) => walk(path, &before, &after, sink, depth + 1)?,
                    None => sink.remove(path)?,
                }
                path.pop();
            }
            for (key, after) in new.entries()? {
                if old.member(&key)?.is_none() {
                    path.push(key);
                    sink.add(path, &after)?;
                    path.pop();
                }
            }
            Ok(())
        }
        (Shape::Array(_), Shape::Array(_)) => {
            let (a, b) = (old.elements()?, new.elements()?);
            let (la, lb) = (a.len(), b.len());
            let mut prefix = 0;
            while prefix < la.min(lb) && a[prefix].same(&b[prefix])? {
                prefix += 1;
            }
            let mut suffix = 0;
            while suffix < la.min(lb) - prefix && a[la - 1 - suffix].same(&b[lb - 1 - suffix])? {
                suffix += 1;
            }
            let (ma, mb) = (la - suffix - prefix, lb - suffix - prefix);
            for i in prefix..prefix + ma.min(mb) {
                path.push(i.to_string());
                walk(path, &a[i], &b[i], sink, depth + 1)?;
                path.pop();
            }
            for _ in mb..ma {
                path.push((prefix + mb).to_string());
                sink.remove(path)?;
                path.pop();
            }
            for (i, after) in b.iter().enumerate().take(prefix + mb).skip(prefix + ma) {
                // Appending at the current end reads best as `-`.
                path.push(if suffix == 0 {
                    "-".to_owned()
                } else {
                    i.to_string()
                });
                sink.add(path, after)?;
                path.pop();
            }
            Ok(())
        }
        _ => {
            if !old.same(new)? {
                sink.replace(path, new)?;
            }
            Ok(())
        }
    }
}
