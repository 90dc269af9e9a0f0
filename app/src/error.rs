//! What keeps the application layer from answering: infrastructure, never a rejection (a
//! command's rejection is a domain type, returned beside this, not inside it).

use gpunex_store::{AppendError, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The in-memory read models did not reach a position in time, or cannot follow the log.
    #[error("the read models are behind the log")]
    ReadModelsBehind,
    #[error(transparent)]
    Store(#[from] StoreError),
    /// An append the store refused for a reason no retry of the same command changes: a check
    /// missing before the store (`AppendError::Invalid`), or a request's Idempotency-Key taken
    /// over by another server (`AppendError::ReservationLost`).
    #[error(transparent)]
    Append(AppendError),
}
