//! The GPU catalog over HTTP: everyone reads it; admins add a model evaluated case by case,
//! after which applications naming it count as catalog models.

use crate::json::Json;
use axum::extract::State;
use axum::http::StatusCode;
use gpunex_domain::codes::ErrorCode;
use gpunex_domain::gpu::{CatalogRejection, GPU_CATALOG};
use serde::{Deserialize, Serialize};

use crate::auth::Caller;
use crate::error::ApiError;
use crate::state::AppState;
use gpunex_domain::gpu::Resolution;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CatalogModel {
    pub model_id: String,
    pub name: String,
    pub vram_gb: u32,
    /// Part of the built-in catalog (with reference figures) rather than added by an admin.
    pub built_in: bool,
    /// Other names applications, prices and searches may use for it (case, spaces, hyphens and
    /// the maker's name do not matter).
    pub aliases: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, utoipa::ToSchema)]
#[schema(examples(json!({"model_id": "b200-192gb", "name": "NVIDIA B200 192GB", "vram_gb": 192})))]
pub struct NewModel {
    #[schema(pattern = "^[a-z0-9-]{2,32}$")]
    pub model_id: String,
    #[schema(min_length = 1, max_length = 100)]
    pub name: String,
    #[schema(minimum = 1, maximum = 1024)]
    pub vram_gb: u32,
}

/// The catalog id `text` names (an id, a name or an alias), or the refusal in words:
/// `ambiguous_model` or `unknown_model`.
pub fn resolve_model(state: &AppState, text: &str) -> Result<String, (ErrorCode, String)> {
    let added = state.credentials.added_models();
    match (gpunex_domain::gpu::Catalog { added: &added }).resolve(text) {
        Resolution::Found(id) => Ok(id.to_owned()),
        Resolution::Ambiguous(ids) => Err((
            ErrorCode::AmbiguousModel,
            format!(
                "`{}` could be {}: name one",
                crate::params::echo(text),
                ids.join(" or ")
            ),
        )),
        Resolution::Unknown => Err((
            ErrorCode::UnknownModel,
            "a catalog model id, name or alias (GET /v1/catalog/models)".to_owned(),
        )),
    }
}

#[utoipa::path(
    get,
    path = "/v1/catalog/models",
    operation_id = "catalog_list",
    tag = "catalog",
    summary = "the GPU models applications may name",
    responses((status = 200, description = "the GPU models applications may name", body = Vec<CatalogModel>)),
)]
pub async fn list(State(state): State<AppState>) -> Json<Vec<CatalogModel>> {
    let built_in = GPU_CATALOG.iter().map(|m| CatalogModel {
        model_id: m.id.to_owned(),
        name: m.name.to_owned(),
        vram_gb: m.vram_gb,
        built_in: true,
        aliases: gpunex_domain::gpu::MODEL_ALIASES
            .iter()
            .filter(|(id, _)| *id == m.id)
            .flat_map(|(_, aliases)| aliases.iter().map(|a| (*a).to_owned()))
            .collect(),
    });
    let added = state
        .credentials
        .added_models()
        .into_iter()
        .map(|m| CatalogModel {
            model_id: m.model_id,
            name: m.name,
            vram_gb: m.vram_gb,
            built_in: false,
            aliases: Vec::new(),
        });
    Json(built_in.chain(added).collect())
}

#[utoipa::path(
    post,
    path = "/v1/catalog/models",
    operation_id = "catalog_add",
    tag = "catalog",
    summary = "add a model evaluated case by case",
    responses((status = 201, description = "add a model evaluated case by case", body = CatalogModel)),
)]
pub async fn add(
    State(state): State<AppState>,
    caller: Caller,
    Json(request): Json<NewModel>,
) -> Result<(StatusCode, Json<CatalogModel>), ApiError> {
    let added = gpunex_app::catalog::add(
        &state.executor(),
        gpunex_app::catalog::NewModel {
            model_id: &request.model_id,
            name: &request.name,
            vram_gb: request.vram_gb,
        },
        &caller.actor(),
    )
    .await?
    .map_err(|refusal| {
        crate::error::command_refused(
            refusal,
            |e| match e {
                CatalogRejection::AlreadyListed => ApiError::Refused {
                    code: e.code(),
                    detail: e.to_string(),
                },
                CatalogRejection::InvalidId => ApiError::body("/model_id", e.code(), e.to_string()),
                CatalogRejection::InvalidName => ApiError::body("/name", e.code(), e.to_string()),
                CatalogRejection::InvalidVram => {
                    ApiError::body("/vram_gb", e.code(), e.to_string())
                }
            },
            "another admin changed the catalog while this request ran; read it again",
        )
    })?;
    Ok((
        StatusCode::CREATED,
        Json(CatalogModel {
            model_id: added.model_id,
            name: added.name,
            vram_gb: added.vram_gb,
            built_in: false,
            aliases: Vec::new(),
        }),
    ))
}
