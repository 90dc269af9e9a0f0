//! One list of routes builds both the router and the OpenAPI document, so a route cannot be
//! added without its documentation and its admitted roles.

use axum::Json;
use axum::handler::Handler;
use axum::routing::{MethodRouter, get, post, put};
use serde_json::{Value, json};

use crate::auth::Allow;
use crate::server::AppState;

/// Who an endpoint admits. The route's guard enforces exactly this list before anything else
/// runs (no body is read for a caller the route does not admit).
pub type Roles = &'static [Allow];
pub const PUBLIC: Roles = &[];
pub const ADMIN: Roles = &[Allow::Admin];
pub const ADMIN_FINANCE: Roles = &[Allow::Admin, Allow::Finance];
pub const ADMIN_PROVIDER: Roles = &[Allow::Admin, Allow::Provider];
pub const TOKEN_HOLDERS: Roles = &[Allow::Admin, Allow::Provider, Allow::User];
pub const ADMIN_TREASURY: Roles = &[Allow::Admin, Allow::Treasury];
pub const PAYOUT_READERS: Roles = &[Allow::Admin, Allow::Finance, Allow::Treasury];
pub const PAYOUT_VIEWERS: Roles = &[
    Allow::Admin,
    Allow::Finance,
    Allow::Treasury,
    Allow::Provider,
];
pub const ADMIN_USER: Roles = &[Allow::Admin, Allow::User];
pub const USER: Roles = &[Allow::User];
pub const AGENT: Roles = &[Allow::Agent];
pub const RENTER: Roles = &[Allow::Renter, Allow::User];
pub const ADMIN_RENTER: Roles = &[Allow::Admin, Allow::Renter, Allow::User];
pub const RENTAL_READERS: Roles = &[
    Allow::Admin,
    Allow::Finance,
    Allow::Renter,
    Allow::User,
    Allow::Provider,
];
pub const RENTAL_LISTERS: Roles = &[Allow::Admin, Allow::Finance, Allow::Renter, Allow::User];
pub const FLEET_READERS: Roles = &[Allow::Admin, Allow::Finance, Allow::Provider, Allow::Agent];
pub const PROVIDER_DASHBOARD: Roles = &[Allow::Admin, Allow::Finance, Allow::Provider];

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

    /// The router: each route behind its guard (authentication, then the route's roles, then
    /// the `Idempotency-Key` of a POST), so the handler's extractors run only for a caller
    /// the route admits.
    pub fn into_router(self, state: &AppState) -> axum::Router<AppState> {
        // Routes of one path with different methods merge into one method router.
        let mut merged: Vec<(&'static str, MethodRouter<AppState>)> = Vec::new();
        for (endpoint, route) in self.endpoints.iter().zip(self.routes) {
            let guard = crate::auth::Guard {
                state: state.clone(),
                roles: endpoint.roles,
            };
            let route = route.1.route_layer(axum::middleware::from_fn_with_state(
                guard,
                crate::auth::guard,
            ));
            match merged.iter_mut().find(|(p, _)| *p == endpoint.path) {
                Some((_, existing)) => *existing = std::mem::take(existing).merge(route),
                None => merged.push((endpoint.path, route)),
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
            "x-gpunex-roles": endpoint.roles.iter().map(|r| r.name()).collect::<Vec<_>>(),
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
