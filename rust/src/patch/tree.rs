//! The document abstraction the one patch engine is generic over.
//!
//! [`Node`] is a read-only view of one JSON node; [`Tree`] adds the handful of primitive
//! mutations the engine needs and the two JSON comparisons. Every RFC 6902 rule (index grammar,
//! `-`, bounds, atomicity) lives in `engine.rs`; an implementation only says how its
//! representation stores objects and arrays. Implemented for `serde_json::Value` (`value.rs`)
//! and, in `crate::bindings::patch`, for Python objects walked with the GIL held.

/// What a node is, as far as pointer resolution cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    Object,
    /// An array of this length.
    Array(usize),
    Scalar,
}

/// A read-only handle to one node of a JSON document.
pub trait Node: Sized {
    /// A failure of the representation itself (a Python object that is not JSON, say).
    type Fault;

    fn shape(&self) -> Result<Shape, Self::Fault>;
    /// The member `key` of an object node (only called on [`Shape::Object`]).
    fn member(&self, key: &str) -> Result<Option<Self>, Self::Fault>;
    /// Element `index` of an array node (only called on [`Shape::Array`]).
    fn element(&self, index: usize) -> Result<Option<Self>, Self::Fault>;
    /// An array's elements in order (only called on [`Shape::Array`]).
    fn elements(&self) -> Result<Vec<Self>, Self::Fault>;
    /// An object's members in document order (only called on [`Shape::Object`]).
    fn entries(&self) -> Result<Vec<(String, Self)>, Self::Fault>;
    /// Identical JSON values, type for type: `true` is not `1`, `1` is not `1.0`. Used by diff,
    /// whose patches must reproduce the new document exactly.
    fn same(&self, other: &Self) -> Result<bool, Self::Fault>;
}

/// A mutable JSON document, with `L` the type of the literal values a patch carries.
///
/// Mutations address a container handle obtained by walking from [`Tree::root_mut`]; the engine
/// records their inverses so a failed patch can be rolled back.
pub trait Tree<L> {
    /// A detached value, owned and ready to be placed into the document.
    type Value;
    type Fault;
    type Node<'a>: Node<Fault = Self::Fault>
    where
        Self: 'a;
    type NodeMut<'a>
    where
        Self: 'a;

    fn root(&self) -> Self::Node<'_>;
    fn root_mut(&mut self) -> Self::NodeMut<'_>;
    /// Replace the whole document, returning the previous one.
    fn replace_root(&mut self, value: Self::Value) -> Self::Value;

    fn shape_mut(node: &Self::NodeMut<'_>) -> Result<Shape, Self::Fault>;
    fn member_mut<'a>(
        node: Self::NodeMut<'a>,
        key: &str,
    ) -> Result<Option<Self::NodeMut<'a>>, Self::Fault>
    where
        Self: 'a;
    fn element_mut<'a>(
        node: Self::NodeMut<'a>,
        index: usize,
    ) -> Result<Option<Self::NodeMut<'a>>, Self::Fault>
    where
        Self: 'a;

    /// True when the object has member `key`.
    fn obj_contains(node: &Self::NodeMut<'_>, key: &str) -> Result<bool, Self::Fault>;
    /// Set `key` on an object: an existing member keeps its position, a new one goes last.
    /// Returns the previous value.
    fn obj_set(
        node: &mut Self::NodeMut<'_>,
        key: &str,
        value: Self::Value,
    ) -> Result<Option<Self::Value>, Self::Fault>;
    /// Remove `key`, keeping the order of the others; returns its position and value.
    fn obj_remove(
        node: &mut Self::NodeMut<'_>,
        key: &str,
    ) -> Result<Option<(usize, Self::Value)>, Self::Fault>;
    /// Put `key` back at `position` (undo of [`Tree::obj_remove`]).
    fn obj_insert_at(
        node: &mut Self::NodeMut<'_>,
        position: usize,
        key: &str,
        value: Self::Value,
    ) -> Result<(), Self::Fault>;
    /// Insert at `index` (`index <= len`), shifting later elements up.
    fn arr_insert(
        node: &mut Self::NodeMut<'_>,
        index: usize,
        value: Self::Value,
    ) -> Result<(), Self::Fault>;
    /// Remove element `index` (`index < len`).
    fn arr_remove(node: &mut Self::NodeMut<'_>, index: usize) -> Result<Self::Value, Self::Fault>;
    /// Replace element `index` (`index < len`), returning the previous one.
    fn arr_set(
        node: &mut Self::NodeMut<'_>,
        index: usize,
        value: Self::Value,
    ) -> Result<Self::Value, Self::Fault>;

    /// Deep copy of a node (`copy`): containers are new, immutable scalars may be shared.
    fn clone_node(node: &Self::Node<'_>) -> Result<Self::Value, Self::Fault>;
    /// Deep copy of a patch literal: nothing from the patch is ever aliased into the document.
    fn import(literal: &L) -> Result<Self::Value, Self::Fault>;
    /// RFC 6902 `test` equality: numbers by value (`1` equals `1.0`), booleans are not numbers,
    /// `NaN` equals nothing, object member order is irrelevant.
    fn equals(node: &Self::Node<'_>, literal: &L) -> Result<bool, Self::Fault>;
}
