//! The `Idempotency-Key` reservation of the request in scope (a task-local): the appends a
//! request makes carry it to the writer, which records their commit, and the prepared response,
//! on the reservation in the same transaction (see `idempotency`).

use std::sync::{Arc, Mutex};

/// The reservation an append belongs to, with the response its handler prepared (recorded with
/// the append that commits it).
#[derive(Debug, Clone)]
pub struct KeyMark {
    pub caller: String,
    pub key: String,
    pub owner: String,
    pub response: Option<(u16, String)>,
}

/// The request in scope: its reservation, and the response the handler prepares.
#[derive(Debug, Clone)]
struct Scope {
    caller: String,
    key: String,
    owner: String,
    response: Arc<Mutex<Option<(u16, String)>>>,
}

tokio::task_local! {
    static REQUEST: Scope;
}

/// Runs `future` as the request holding `key` for `caller`, reserved by `owner`.
pub(crate) async fn scoped<F: std::future::Future>(
    caller: &str,
    key: &str,
    owner: &str,
    future: F,
) -> F::Output {
    let scope = Scope {
        caller: caller.to_owned(),
        key: key.to_owned(),
        owner: owner.to_owned(),
        response: Arc::default(),
    };
    REQUEST.scope(scope, future).await
}

/// Prepares the response of the request in scope, to be recorded with its next append: a retry
/// after a crash then gets exactly it. Does nothing outside a request with a key.
pub fn prepare_response(status: u16, body: String) {
    let _ = REQUEST.try_with(|scope| {
        if let Ok(mut response) = scope.response.lock() {
            *response = Some((status, body));
        }
    });
}

/// The reservation of the request in scope, taking its prepared response.
pub(crate) fn current_mark() -> Option<KeyMark> {
    REQUEST
        .try_with(|scope| KeyMark {
            caller: scope.caller.clone(),
            key: scope.key.clone(),
            owner: scope.owner.clone(),
            response: scope.response.lock().ok().and_then(|mut r| r.take()),
        })
        .ok()
}
