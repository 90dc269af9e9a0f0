//! One list of routes builds both the router and the OpenAPI document, so a route cannot be
//! added without its documentation and its admitted roles.

use axum::Json;
use axum::handler::Handler;
use axum::routing::{MethodRouter, get, post, put};
use serde_json::{Value, json};

use crate::server::AppState;

/// Who an endpoint admits (each handler enforces the same list with `Caller::require`).
pub type Roles = &'static [&'static str];
pub const PUBLIC: Roles = &[];
pub const ADMIN: Roles = &["admin"];
pub const ADMIN_FINANCE: Roles = &["admin", "finance"];
pub const ADMIN_PROVIDER: Roles = &["admin", "provider"];
pub const ADMIN_USER: Roles = &["admin", "user"];
pub const USER: Roles = &["user"];
pub const AGENT: Roles = &["agent"];
pub const RENTER: Roles = &["renter"];
pub const ADMIN_RENTER: Roles = &["admin", "renter"];
pub const RENTAL_READERS: Roles = &["admin", "finance", "renter", "provider"];
pub const RENTAL_LISTERS: Roles = &["admin", "finance", "renter"];
pub const FLEET_READERS: Roles = &["admin", "finance", "provider", "agent"];
pub const PROVIDER_DASHBOARD: Roles = &["admin", "finance", "provider"];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub method: &'static str,
    pub path: &'static str,
    pub summary: &'static str,
    pub roles: Roles,
}

/// The endpoints and the router being built from them.
#[derive(Default)]
pub struct Routes {
    endpoints: Vec<Endpoint>,
    routes: Vec<(&'static str, MethodRouter<AppState>)>,
}

impl Routes {
    pub fn get<H, T>(
        self,
        path: &'static str,
        summary: &'static str,
        roles: Roles,
        handler: H,
    ) -> Routes
    where
        H: Handler<T, AppState>,
        T: 'static,
    {
        self.add("get", path, summary, roles, get(handler))
    }

    pub fn post<H, T>(
        self,
        path: &'static str,
        summary: &'static str,
        roles: Roles,
        handler: H,
    ) -> Routes
    where
        H: Handler<T, AppState>,
        T: 'static,
    {
        self.add("post", path, summary, roles, post(handler))
    }

    pub fn put<H, T>(
        self,
        path: &'static str,
        summary: &'static str,
        roles: Roles,
        handler: H,
    ) -> Routes
    where
        H: Handler<T, AppState>,
        T: 'static,
    {
        self.add("put", path, summary, roles, put(handler))
    }

    fn add(
        mut self,
        method: &'static str,
        path: &'static str,
        summary: &'static str,
        roles: Roles,
        route: MethodRouter<AppState>,
    ) -> Routes {
        self.endpoints.push(Endpoint {
            method,
            path,
            summary,
            roles,
        });
        self.routes.push((path, route));
        self
    }

    pub fn endpoints(&self) -> &[Endpoint] {
        &self.endpoints
    }

    pub fn into_router(self) -> axum::Router<AppState> {
        // Routes of one path with different methods merge into one method router.
        let mut merged: Vec<(&'static str, MethodRouter<AppState>)> = Vec::new();
        for (path, route) in self.routes {
            match merged.iter_mut().find(|(p, _)| *p == path) {
                Some((_, existing)) => *existing = std::mem::take(existing).merge(route),
                None => merged.push((path, route)),
            }
        }
        merged
            .into_iter()
            .fold(axum::Router::new(), |router, (path, route)| {
                router.route(path, route)
            })
    }
}

/// The OpenAPI 3.1 document of `endpoints`: paths, methods, summaries, admitted roles
/// (`x-gpunex-roles`) and bearer security, with RFC 9457 problem responses.
pub fn document(endpoints: &[Endpoint]) -> Value {
    let mut paths = serde_json::Map::new();
    for endpoint in endpoints {
        let mut operation = json!({
            "summary": endpoint.summary,
            "x-gpunex-roles": endpoint.roles,
            "responses": {
                "2XX": {"description": "success", "content": {"application/json": {}}},
                "4XX": {"description": "a problem with the request", "content": {"application/problem+json": {}}},
            },
        });
        if !endpoint.roles.is_empty() {
            operation["security"] = json!([{"bearer": []}]);
        }
        let item = paths.entry(endpoint.path).or_insert_with(|| json!({}));
        item[endpoint.method] = operation;
    }
    json!({
        "openapi": "3.1.0",
        "info": {"title": "GPUnex API", "version": env!("CARGO_PKG_VERSION")},
        "paths": paths,
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    })
}

pub async fn openapi() -> Json<Value> {
    Json(document(crate::server::endpoints().endpoints()))
}
