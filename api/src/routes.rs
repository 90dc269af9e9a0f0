//! One list of routes builds both the router and the OpenAPI document, so a route cannot be
//! added without its documentation and its admitted roles.
//!
//! Each handler carries its operation (`#[utoipa::path]`: path, method, parameters, responses;
//! the request body is read off its `Json<T>` argument, path parameters off its `Path`); the
//! list adds the roles. From the two come the router (each route behind its guard, which
//! enforces exactly those roles and refuses query parameters the operation does not declare)
//! and the document (roles as the bearer scheme's scopes and `x-gpunex-roles`, the problem
//! responses each route can give, every schema from the types that serialize the bodies).

use axum::routing::MethodRouter;
use serde_json::{Value, json};
use utoipa::openapi::RefOr;
use utoipa::openapi::path::Paths;
use utoipa::openapi::schema::Schema;

use crate::auth::Allow;
use crate::error::{ErrorCode, status_of};
use crate::state::AppState;

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

/// One operation of the API, as the tests and the guard see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub method: String,
    pub path: String,
    pub operation_id: String,
    pub summary: String,
    pub roles: Roles,
    /// Also admits requests from the loopback interface without credentials (`GET /metrics`,
    /// for a Prometheus on the same host), when the server allows it.
    pub loopback: bool,
    /// The query parameters it declares (the guard refuses others).
    pub query_parameters: Vec<String>,
    /// The document's operation object.
    pub operation: Value,
}

/// What `utoipa_axum::routes!` gives for one handler.
pub type Route = (Vec<(String, RefOr<Schema>)>, Paths, MethodRouter<AppState>);

/// The endpoints and the router being built from them.
#[derive(Default)]
pub struct Routes {
    endpoints: Vec<Endpoint>,
    routers: Vec<MethodRouter<AppState>>,
    schemas: Vec<(String, Value)>,
}

impl Routes {
    /// Adds one handler (`routes!(handler)`) admitting `roles`.
    pub fn add(self, roles: Roles, route: Route) -> Routes {
        self.push(roles, false, route)
    }

    /// Adds one handler admitting `roles`, and loopback requests without credentials.
    pub fn add_loopback(self, roles: Roles, route: Route) -> Routes {
        self.push(roles, true, route)
    }

    fn push(mut self, roles: Roles, loopback: bool, (schemas, paths, router): Route) -> Routes {
        let paths = serde_json::to_value(&paths).unwrap_or_default();
        let (path, item) = paths
            .as_object()
            .and_then(|paths| paths.iter().next())
            .map(|(path, item)| (path.clone(), item.clone()))
            .unwrap_or_default();
        let (method, operation) = item
            .as_object()
            .and_then(|item| item.iter().next())
            .map(|(method, operation)| (method.clone(), operation.clone()))
            .unwrap_or_default();
        assert!(
            !path.is_empty() && !method.is_empty(),
            "a route without its #[utoipa::path]"
        );
        let query_parameters = operation["parameters"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["in"] == "query")
            .filter_map(|p| p["name"].as_str().map(str::to_owned))
            .collect();
        let operation = with_contract(operation, &method, roles, loopback);
        self.endpoints.push(Endpoint {
            summary: operation["summary"].as_str().unwrap_or_default().to_owned(),
            operation_id: operation["operationId"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            method,
            path,
            roles,
            loopback,
            query_parameters,
            operation,
        });
        self.routers.push(router);
        for (name, schema) in schemas {
            self.schemas
                .push((name, serde_json::to_value(&schema).unwrap_or_default()));
        }
        self
    }

    pub fn endpoints(&self) -> &[Endpoint] {
        &self.endpoints
    }

    /// The router: each route behind its guard (authentication, then the route's roles and
    /// declared query parameters, then the `Idempotency-Key` of a POST), so the handler's
    /// extractors run only for a caller and a request the route admits.
    pub fn into_router(self, state: &AppState) -> axum::Router<AppState> {
        // Routes of one path with different methods merge into one method router.
        let mut merged: Vec<(String, MethodRouter<AppState>)> = Vec::new();
        for (endpoint, route) in self.endpoints.into_iter().zip(self.routers) {
            let guard = crate::auth::Guard {
                state: state.clone(),
                roles: endpoint.roles,
                loopback: endpoint.loopback,
                query_parameters: std::sync::Arc::new(endpoint.query_parameters),
            };
            let route = route.route_layer(axum::middleware::from_fn_with_state(
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
                router.route(&path, route)
            })
    }

    /// The OpenAPI 3.1 document.
    pub fn document(&self) -> Value {
        let mut paths = serde_json::Map::new();
        for endpoint in &self.endpoints {
            let item = paths
                .entry(endpoint.path.clone())
                .or_insert_with(|| json!({}));
            item[&endpoint.method] = endpoint.operation.clone();
        }
        let mut schemas = serde_json::Map::new();
        for (name, schema) in &self.schemas {
            schemas.insert(name.clone(), schema.clone());
        }
        for (name, schema) in problem_schemas() {
            schemas.insert(name, schema);
        }
        flatten_all_of(&mut schemas);
        close_objects(&mut schemas);
        text_policy(&mut schemas, &mut paths);
        json!({
            "openapi": "3.1.0",
            "info": {
                "title": "GPUnex API",
                "version": env!("CARGO_PKG_VERSION"),
                "description": "The GPUnex marketplace: provider onboarding, agents, listings, rentals, earnings and payouts. Every error is an RFC 9457 problem document with a code from /docs/errors; request bodies follow the JSON policy of docs/api.md.",
            },
            "paths": paths,
            "components": {
                "schemas": schemas,
                "securitySchemes": {"bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "`Authorization: Bearer gpnx_<token id>_<secret>`: an API token (`POST /v1/tokens`) or a session (`POST /v1/sessions`); the console's session is the `gpunex_session` cookie (`POST /v1/browser-sessions`), whose changes carry `X-CSRF-Token`. A person's session acts in another role the person holds by naming it in `X-GPUnex-Act-As` (`admin`, `finance`, `treasury`, `provider:<id>`; see `GET /v1/me`). The scopes of an operation are the roles it admits.",
                }},
            },
            "tags": TAGS.iter().map(|(name, description)| json!({"name": name, "description": description})).collect::<Vec<_>>(),
        })
    }
}

/// The tags of the document, in order.
const TAGS: [(&str, &str); 13] = [
    (
        "operations",
        "health, readiness, the event log and this document",
    ),
    ("accounts", "sign up, sign in and the Roles page"),
    ("applications", "the provider application and its review"),
    ("tokens", "API tokens: issue, list, rotate, revoke"),
    ("catalog", "the GPU models applications and prices may name"),
    (
        "fleet",
        "agents: registration, heartbeats, telemetry; machines as providers and operators see them",
    ),
    (
        "market",
        "prices, availability, maintenance, listings and search, price recommendations",
    ),
    ("rentals", "renting GPUs and the jobs that run on them"),
    ("earnings", "providers' earnings and statements"),
    (
        "payouts",
        "payout settings, batches, the Solana and SEPA rails, history and proof",
    ),
    ("ledger", "the double-entry ledger"),
    ("audit", "reconciliation of the money against the log"),
    ("adjustments", "ledger adjustments under dual control"),
];

/// The operation with what the list adds: the roles as security, and the problem responses the
/// route can give (by status; each lists the codes of its status).
fn with_contract(mut operation: Value, method: &str, roles: Roles, loopback: bool) -> Value {
    let names: Vec<&str> = roles.iter().map(|r| r.name()).collect();
    operation["x-gpunex-roles"] = json!(names);
    if loopback {
        // An empty requirement: no credentials (from the loopback interface).
        operation["x-gpunex-loopback"] = json!(true);
        operation["security"] = json!([{"bearer": names}, {}]);
    } else if !roles.is_empty() {
        operation["security"] = json!([{"bearer": names}]);
    }
    let has_body = operation.get("requestBody").is_some();
    let has_path_parameters = operation["parameters"]
        .as_array()
        .is_some_and(|p| p.iter().any(|p| p["in"] == "path"));
    let mut statuses: Vec<u16> = vec![400, 500, 503];
    if !roles.is_empty() {
        statuses.extend([401, 403, 404, 429]);
    } else if has_path_parameters {
        statuses.push(404);
    }
    if method != "get" {
        statuses.extend([409, 422]);
    }
    if has_body {
        statuses.extend([408, 413, 415]);
    }
    if let Some(responses) = operation["responses"].as_object_mut() {
        for status in statuses {
            responses
                .entry(status.to_string())
                .or_insert_with(|| problem_response(status));
        }
    }
    operation
}

/// Replaces each `allOf` (how utoipa spells a flattened type or a tagged newtype variant) by the
/// one object it means, distributing over a part that is a `oneOf`: `{id} + oneOf[a, b]` becomes
/// `oneOf[{id, a}, {id, b}]`. Client generators read plain objects and unions far better than
/// intersections, and the meaning is the same.
fn flatten_all_of(schemas: &mut serde_json::Map<String, Value>) {
    let snapshot = schemas.clone();
    for schema in schemas.values_mut() {
        flatten(schema, &snapshot);
    }
}

fn flatten(schema: &mut Value, components: &serde_json::Map<String, Value>) {
    match schema {
        Value::Object(object) => {
            object
                .values_mut()
                .for_each(|value| flatten(value, components));
            if let Some(Value::Array(parts)) = object.remove("allOf") {
                let description = object.remove("description");
                let mut merged = merge_parts(&parts, components);
                if let (Some(description), Value::Object(merged)) = (description, &mut merged) {
                    merged.insert("description".to_owned(), description);
                }
                object.clear();
                if let Value::Object(merged) = merged {
                    object.extend(merged);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|item| flatten(item, components)),
        _ => {}
    }
}

/// The schema a part stands for: a `$ref` to a component resolved, once flattened itself.
fn resolve(part: &Value, components: &serde_json::Map<String, Value>) -> Value {
    let mut resolved = match part["$ref"].as_str().and_then(|r| r.rsplit('/').next()) {
        Some(name) => components.get(name).cloned().unwrap_or(Value::Null),
        None => part.clone(),
    };
    flatten(&mut resolved, components);
    resolved
}

fn merge_parts(parts: &[Value], components: &serde_json::Map<String, Value>) -> Value {
    let resolved: Vec<Value> = parts.iter().map(|p| resolve(p, components)).collect();
    if let Some(index) = resolved.iter().position(|p| p.get("oneOf").is_some()) {
        let branches = resolved[index]["oneOf"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let others: Vec<Value> = resolved
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != index)
            .map(|(_, p)| p.clone())
            .collect();
        let one_of: Vec<Value> = branches
            .into_iter()
            .map(|branch| {
                let mut parts = others.clone();
                parts.push(resolve(&branch, components));
                merge_parts(&parts, components)
            })
            .collect();
        return json!({"oneOf": one_of});
    }
    let mut properties = serde_json::Map::new();
    let mut required: Vec<Value> = Vec::new();
    for part in &resolved {
        if let Some(Value::Object(part_properties)) = part.get("properties") {
            properties.extend(part_properties.clone());
        }
        for name in part["required"].as_array().into_iter().flatten() {
            if !required.contains(name) {
                required.push(name.clone());
            }
        }
    }
    let mut object = json!({"type": "object", "properties": properties});
    if !required.is_empty() {
        object["required"] = Value::Array(required);
    }
    object
}

/// Marks every object schema closed (`additionalProperties: false`): request bodies refuse
/// unknown fields (`docs/api.md`), and responses carry exactly their types' fields. A schema
/// that is one part of an `allOf` (a flattened type) stays open, and the `allOf` is closed as a
/// whole (`unevaluatedProperties: false`), so the parts' properties count together.
fn close_objects(schemas: &mut serde_json::Map<String, Value>) {
    // Schemas named from an `allOf`: their own top level (and its `oneOf` branches) stays open.
    let mut open = std::collections::HashSet::new();
    for schema in schemas.values() {
        collect_all_of_references(schema, &mut open);
    }
    for (name, schema) in schemas.iter_mut() {
        close(schema, open.contains(name));
    }
}

fn collect_all_of_references(schema: &Value, open: &mut std::collections::HashSet<String>) {
    match schema {
        Value::Object(object) => {
            if let Some(Value::Array(parts)) = object.get("allOf") {
                for part in parts {
                    if let Some(name) = part["$ref"].as_str().and_then(|r| r.rsplit('/').next()) {
                        open.insert(name.to_owned());
                    }
                }
            }
            object
                .values()
                .for_each(|value| collect_all_of_references(value, open));
        }
        Value::Array(items) => items
            .iter()
            .for_each(|item| collect_all_of_references(item, open)),
        _ => {}
    }
}

/// The JSON policy's refused characters as patterns (ECMA-262): control characters and
/// bidirectional embeddings, overrides and isolates; free-text fields may hold tab, line feed
/// and carriage return. `api::json::check_text` enforces the same sets.
pub const TEXT_PATTERN: &str = "^[^\\u0000-\\u001F\\u007F-\\u009F\\u202A-\\u202E\\u2066-\\u2069]*$";
pub const FREE_TEXT_PATTERN: &str = "^[^\\u0000-\\u0008\\u000B\\u000C\\u000E-\\u001F\\u007F-\\u009F\\u202A-\\u202E\\u2066-\\u2069]*$";

/// States the JSON policy's character rule in the schemas of request bodies: every string of a
/// schema a request body reaches (and of inline request bodies) without a format, an enum or a
/// pattern of its own gets [`TEXT_PATTERN`], or [`FREE_TEXT_PATTERN`] under a free-text field.
/// So a client or fuzzer that follows the document sends what the server accepts.
fn text_policy(
    schemas: &mut serde_json::Map<String, Value>,
    paths: &mut serde_json::Map<String, Value>,
) {
    let mut reached = std::collections::BTreeSet::new();
    let mut pending: Vec<String> = Vec::new();
    for item in paths.values_mut() {
        for operation in item
            .as_object_mut()
            .into_iter()
            .flat_map(|o| o.values_mut())
        {
            // `get_mut`, not indexing: indexing a JSON value for writing adds what is missing.
            let media_types = operation
                .get_mut("requestBody")
                .and_then(|body| body.get_mut("content"))
                .and_then(Value::as_object_mut);
            for media in media_types.into_iter().flat_map(|c| c.values_mut()) {
                if let Some(schema) = media.get_mut("schema") {
                    collect_references(schema, &mut pending);
                    pattern_strings(schema, false);
                }
            }
        }
    }
    while let Some(name) = pending.pop() {
        if reached.insert(name.clone())
            && let Some(schema) = schemas.get(&name)
        {
            collect_references(schema, &mut pending);
        }
    }
    for name in reached {
        if let Some(schema) = schemas.get_mut(&name) {
            pattern_strings(schema, false);
        }
    }
}

fn collect_references(schema: &Value, into: &mut Vec<String>) {
    match schema {
        Value::Object(object) => {
            if let Some(name) = object
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|r| r.strip_prefix("#/components/schemas/"))
            {
                into.push(name.to_owned());
            }
            object
                .values()
                .for_each(|value| collect_references(value, into));
        }
        Value::Array(items) => items.iter().for_each(|item| collect_references(item, into)),
        _ => {}
    }
}

fn pattern_strings(schema: &mut Value, free: bool) {
    let Value::Object(object) = schema else {
        return;
    };
    let is_string = match object.get("type") {
        Some(Value::String(kind)) => kind == "string",
        Some(Value::Array(kinds)) => kinds.iter().any(|k| k == "string"),
        _ => false,
    };
    if is_string
        && !["format", "enum", "pattern", "const"]
            .iter()
            .any(|key| object.contains_key(*key))
    {
        let pattern = if free {
            FREE_TEXT_PATTERN
        } else {
            TEXT_PATTERN
        };
        object.insert("pattern".to_owned(), Value::String(pattern.to_owned()));
    }
    for (key, value) in object.iter_mut() {
        match key.as_str() {
            "properties" => {
                if let Value::Object(properties) = value {
                    for (name, property) in properties.iter_mut() {
                        let free = free || crate::json::FREE_TEXT_FIELDS.contains(&name.as_str());
                        pattern_strings(property, free);
                    }
                }
            }
            "items" | "additionalProperties" => pattern_strings(value, free),
            "oneOf" | "anyOf" | "allOf" | "prefixItems" => {
                if let Value::Array(parts) = value {
                    parts
                        .iter_mut()
                        .for_each(|part| pattern_strings(part, free));
                }
            }
            _ => {}
        }
    }
}

/// Closes `schema` and what it nests; `open` leaves its own level (and its alternatives) open.
fn close(schema: &mut Value, open: bool) {
    let Value::Object(object) = schema else {
        return;
    };
    if object.contains_key("allOf") {
        object.insert("unevaluatedProperties".to_owned(), Value::Bool(false));
        if let Some(Value::Array(parts)) = object.get_mut("allOf") {
            parts.iter_mut().for_each(|part| close(part, true));
        }
    } else if object.contains_key("properties")
        && !object.contains_key("additionalProperties")
        && !open
    {
        object.insert("additionalProperties".to_owned(), Value::Bool(false));
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(Value::Array(branches)) = object.get_mut(key) {
            branches.iter_mut().for_each(|branch| close(branch, open));
        }
    }
    if let Some(Value::Object(properties)) = object.get_mut("properties") {
        properties
            .values_mut()
            .for_each(|property| close(property, false));
    }
    if let Some(items) = object.get_mut("items") {
        close(items, false);
    }
}

/// A problem response of `status`, listing the codes it can carry.
fn problem_response(status: u16) -> Value {
    let codes: Vec<&str> = ErrorCode::ALL
        .iter()
        .filter(|code| status_of(**code).as_u16() == status)
        .map(|code| code.as_str())
        .collect();
    let reason = axum::http::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("error")
        .to_lowercase();
    json!({
        "description": format!("{reason}: a problem document with one of the codes {}", codes.join(", ")),
        "content": {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}},
    })
}

/// `Problem`, `FieldError` and `ErrorCode`: the one error shape, its codes the closed list.
fn problem_schemas() -> Vec<(String, Value)> {
    let codes: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
    vec![
        (
            "ErrorCode".to_owned(),
            json!({"type": "string", "enum": codes, "description": "a stable code; each is explained at /docs/errors"}),
        ),
        (
            "FieldError".to_owned(),
            json!({
                "type": "object",
                "required": ["field", "in", "code", "message"],
                "properties": {
                    "field": {"type": "string", "description": "a JSON Pointer into the body, or a parameter or header name"},
                    "in": {"type": "string", "enum": ["body", "query", "path", "header"]},
                    "code": {"$ref": "#/components/schemas/ErrorCode"},
                    "message": {"type": "string"},
                },
                "additionalProperties": false,
            }),
        ),
        (
            "Problem".to_owned(),
            json!({
                "type": "object",
                "description": "An RFC 9457 problem document (application/problem+json).",
                "required": ["type", "title", "status", "detail", "code"],
                "properties": {
                    "type": {"type": "string", "description": "a URI reference to the code's explanation"},
                    "title": {"type": "string"},
                    "status": {"type": "integer", "minimum": 400, "maximum": 599},
                    "detail": {"type": "string"},
                    "code": {"$ref": "#/components/schemas/ErrorCode"},
                    "errors": {"type": "array", "items": {"$ref": "#/components/schemas/FieldError"}},
                },
                "additionalProperties": false,
            }),
        ),
    ]
}
