//! Parameter lists for statements built at run time (multi-row inserts, `IN` lists): placeholders
//! only, never values.

use crate::Backend;

/// The parameter list of `rows` rows of `n` values each. SQLite gets anonymous `?` parameters:
/// sqlx looks every numbered or named one up by name, a scan of the statement's parameters, which
/// made a 4,500-parameter insert quadratic (80% of a rebuild's time); PostgreSQL needs `$n`.
/// Moves a projection's checkpoint (`$3`) from `$4` to `$1`, stamped `$2`, in the transaction
/// that writes its rows (no row: another fold moved it first, `StoreError::CheckpointMoved`).
pub(crate) const MOVE_CHECKPOINT: &str = "UPDATE projection_checkpoints SET position = $1, \
     updated_at_us = $2 WHERE projection = $3 AND position = $4";

pub(crate) fn values(backend: Backend, rows: usize, n: usize) -> String {
    (0..rows)
        .map(|r| {
            let list: Vec<String> = (1..=n).map(|c| parameter(backend, r * n + c)).collect();
            format!("({})", list.join(", "))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

pub(crate) fn placeholders(backend: Backend, n: usize) -> String {
    (1..=n)
        .map(|i| parameter(backend, i))
        .collect::<Vec<_>>()
        .join(", ")
}

fn parameter(backend: Backend, i: usize) -> String {
    match backend {
        Backend::Sqlite => "?".to_owned(),
        Backend::Postgres => format!("${i}"),
    }
}

/// A value bound to a statement built at run time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Bound {
    Int(i64),
    Text(String),
    /// A boolean column (PostgreSQL's `BOOLEAN`; SQLite stores 0 or 1).
    Bool(bool),
}

/// The values of a statement built at run time, each placeholder made as its value is added, so
/// the placeholders' order in the text is the values' order (SQLite's `?` are positional).
#[derive(Debug)]
pub(crate) struct Binds {
    backend: Backend,
    pub(crate) values: Vec<Bound>,
}

impl Binds {
    pub(crate) fn new(backend: Backend) -> Binds {
        Binds {
            backend,
            values: Vec::new(),
        }
    }

    /// The placeholder of a new integer value.
    pub(crate) fn int(&mut self, value: i64) -> String {
        self.values.push(Bound::Int(value));
        parameter(self.backend, self.values.len())
    }

    /// The placeholder of a new text value.
    pub(crate) fn text(&mut self, value: String) -> String {
        self.values.push(Bound::Text(value));
        parameter(self.backend, self.values.len())
    }
}
