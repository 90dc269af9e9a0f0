//! The web console (ADR 0008): a page shell, one ES module and one stylesheet, and a string
//! catalog per language, all embedded in the binary and served by `gpunex serve` itself. The
//! console is a client of the public `/v1` API: these routes serve files, never data.
//!
//! `GET /` and every `GET /console/...` path answer the same shell (the module routes in the
//! browser), in the language of the `gpunex_lang` cookie (the page's switch) or else the
//! request's `Accept-Language`, Spanish by default (the guide's language).

use axum::Router;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::error::ApiError;

const SHELL: &str = include_str!("../../console/index.html");

/// Every file under `/assets/`: its path there, its content type and its text. The modules
/// import each other by these paths.
pub const ASSETS: &[(&str, &str, &str)] = &[
    (
        "console.js",
        JS,
        include_str!("../../console/assets/console.js"),
    ),
    (
        "console.css",
        CSS,
        include_str!("../../console/assets/console.css"),
    ),
    (
        "lib/api.js",
        JS,
        include_str!("../../console/assets/lib/api.js"),
    ),
    (
        "lib/dom.js",
        JS,
        include_str!("../../console/assets/lib/dom.js"),
    ),
    (
        "lib/format.js",
        JS,
        include_str!("../../console/assets/lib/format.js"),
    ),
    (
        "lib/chart.js",
        JS,
        include_str!("../../console/assets/lib/chart.js"),
    ),
    (
        "lib/i18n.js",
        JS,
        include_str!("../../console/assets/lib/i18n.js"),
    ),
    (
        "lib/schedule.js",
        JS,
        include_str!("../../console/assets/lib/schedule.js"),
    ),
    (
        "pages/account.js",
        JS,
        include_str!("../../console/assets/pages/account.js"),
    ),
    (
        "pages/apply.js",
        JS,
        include_str!("../../console/assets/pages/apply.js"),
    ),
    (
        "pages/review.js",
        JS,
        include_str!("../../console/assets/pages/review.js"),
    ),
    (
        "pages/provider.js",
        JS,
        include_str!("../../console/assets/pages/provider.js"),
    ),
    (
        "pages/machines.js",
        JS,
        include_str!("../../console/assets/pages/machines.js"),
    ),
    (
        "pages/prices.js",
        JS,
        include_str!("../../console/assets/pages/prices.js"),
    ),
    (
        "pages/earnings.js",
        JS,
        include_str!("../../console/assets/pages/earnings.js"),
    ),
    (
        "pages/payouts.js",
        JS,
        include_str!("../../console/assets/pages/payouts.js"),
    ),
    (
        "pages/finance.js",
        JS,
        include_str!("../../console/assets/pages/finance.js"),
    ),
    (
        "pages/market.js",
        JS,
        include_str!("../../console/assets/pages/market.js"),
    ),
];

const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

/// The languages the console speaks, with their catalogs; the first is the default.
pub const CATALOGS: [(&str, &str); 2] = [
    ("es", include_str!("../../console/i18n/es.json")),
    ("en", include_str!("../../console/i18n/en.json")),
];

/// What the shell's and the assets' answers carry: scripts and styles from this origin only,
/// no framing, no inline script, no referrer.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; \
     form-action 'self'; object-src 'none'";

/// The console's routes, merged beside the API's.
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(shell))
        .route("/console", get(shell))
        .route("/console/{*page}", get(shell))
        .route("/assets/i18n/{file}", get(catalog))
        .route("/assets/{*file}", get(file))
}

async fn file(
    crate::params::Path(path): crate::params::Path<String>,
    headers: HeaderMap,
) -> Response {
    match ASSETS.iter().find(|(name, _, _)| *name == path) {
        Some((name, content_type, body)) => asset(name, content_type, body, &headers),
        None => ApiError::NoRoute.into_response(),
    }
}

fn secured(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    // Revalidated on every load, so a new binary's console is what the browser runs.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// A file with its validator: the browser revalidates (`no-cache`) and, while the binary is the
/// same, is answered `304 Not Modified` without the body.
fn asset(
    name: &str,
    content_type: &'static str,
    body: &'static str,
    headers: &HeaderMap,
) -> Response {
    let tag = etag(name, body);
    let unchanged = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.split(',').any(|t| t.trim() == tag));
    let mut response = if unchanged {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, content_type)], body).into_response()
    };
    if let Ok(value) = HeaderValue::from_str(&tag) {
        response.headers_mut().insert(header::ETAG, value);
    }
    secured(response)
}

/// A strong validator of an embedded file: its SHA-256, computed once per file.
fn etag(name: &str, body: &str) -> String {
    use sha2::{Digest, Sha256};
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static TAGS: OnceLock<Mutex<HashMap<String, String>>> = OnceLock::new();
    let tags = TAGS.get_or_init(Default::default);
    let mut tags = tags.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    tags.entry(name.to_owned())
        .or_insert_with(|| {
            format!(
                "\"{}\"",
                &hex::encode(Sha256::digest(body.as_bytes()))[..32]
            )
        })
        .clone()
}

async fn shell(headers: HeaderMap) -> Response {
    let lang = language(&headers);
    let page = SHELL.replace("{{lang}}", lang);
    let mut response = secured(
        (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            page,
        )
            .into_response(),
    );
    response.headers_mut().insert(
        header::VARY,
        HeaderValue::from_static("Accept-Language, Cookie"),
    );
    response
}

async fn catalog(
    crate::params::Path(file): crate::params::Path<String>,
    headers: HeaderMap,
) -> Response {
    match CATALOGS
        .iter()
        .find(|(lang, _)| file.strip_suffix(".json") == Some(lang))
    {
        Some((lang, body)) => asset(lang, "application/json", body, &headers),
        None => ApiError::NoRoute.into_response(),
    }
}

/// The console's language for a request: the `gpunex_lang` cookie, else the best
/// `Accept-Language` entry the console speaks (RFC 9110, section 12.5.4), else Spanish.
pub fn language(headers: &HeaderMap) -> &'static str {
    let known = |tag: &str| {
        let primary = tag.split('-').next().unwrap_or_default().trim();
        CATALOGS
            .iter()
            .map(|(lang, _)| *lang)
            .find(|lang| lang.eq_ignore_ascii_case(primary))
    };
    let chosen = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == "gpunex_lang")
        .and_then(|(_, value)| known(value));
    if let Some(lang) = chosen {
        return lang;
    }
    let mut best: Option<(&'static str, u32)> = None;
    for value in headers
        .get_all(header::ACCEPT_LANGUAGE)
        .iter()
        .filter_map(|value| value.to_str().ok())
    {
        for entry in value.split(',') {
            let mut parts = entry.split(';');
            let tag = parts.next().unwrap_or_default().trim();
            // Weights in thousandths, so no float is compared.
            let weight = parts
                .filter_map(|p| p.trim().strip_prefix("q="))
                .map(weight_thousandths)
                .next()
                .unwrap_or(1000);
            if let Some(lang) = known(tag)
                && weight > 0
                && best.is_none_or(|(_, w)| weight > w)
            {
                best = Some((lang, weight));
            }
        }
    }
    best.map_or(CATALOGS[0].0, |(lang, _)| lang)
}

/// `q=0.8` as 800 (a malformed weight counts as 0).
fn weight_thousandths(q: &str) -> u32 {
    let (whole, fraction) = q.trim().split_once('.').unwrap_or((q.trim(), ""));
    let whole: u32 = match whole {
        "1" => 1,
        "0" => 0,
        _ => return 0,
    };
    let digits: String = fraction.chars().take(3).collect();
    if !digits.chars().all(|c| c.is_ascii_digit()) {
        return 0;
    }
    let fraction = format!("{digits:0<3}").parse::<u32>().unwrap_or(0);
    (whole * 1000 + fraction).min(1000)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn the_language_comes_from_the_switch_then_accept_language() {
        assert_eq!(language(&headers(&[])), "es");
        assert_eq!(
            language(&headers(&[("accept-language", "en-GB,en;q=0.9")])),
            "en"
        );
        assert_eq!(
            language(&headers(&[(
                "accept-language",
                "fr-FR, en;q=0.5, es;q=0.8"
            )])),
            "es"
        );
        assert_eq!(
            language(&headers(&[("accept-language", "en;q=0, fr")])),
            "es"
        );
        assert_eq!(
            language(&headers(&[
                ("accept-language", "en"),
                ("cookie", "a=b; gpunex_lang=es")
            ])),
            "es"
        );
        assert_eq!(
            language(&headers(&[
                ("cookie", "gpunex_lang=xx"),
                ("accept-language", "en")
            ])),
            "en"
        );
        assert_eq!(weight_thousandths("0.25"), 250);
        assert_eq!(weight_thousandths("1.000"), 1000);
        assert_eq!(weight_thousandths("0.x"), 0);
    }

    fn keys(catalog: &str) -> BTreeSet<String> {
        let value: serde_json::Value = serde_json::from_str(catalog).expect("a catalog is JSON");
        let object = value.as_object().expect("a catalog is an object");
        for (key, text) in object {
            assert!(
                text.as_str().is_some_and(|t| !t.trim().is_empty()),
                "{key} is empty"
            );
        }
        object.keys().cloned().collect()
    }

    /// Every catalog has the same keys, and every key the console asks for with `t("...")`
    /// or as `error.<code>` is in them (each code named is a real one).
    #[test]
    fn every_string_is_in_every_catalog() {
        let spanish = keys(CATALOGS[0].1);
        for (lang, catalog) in &CATALOGS[1..] {
            assert_eq!(keys(catalog), spanish, "{lang} has other keys than es");
        }
        let mut used = BTreeSet::new();
        for (_, _, script) in ASSETS.iter().filter(|(_, kind, _)| *kind == JS) {
            for (at, call) in script.match_indices("t(\"") {
                // `t(` itself, not the end of another name (`split(":")`).
                if script[..at]
                    .chars()
                    .next_back()
                    .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.')
                {
                    continue;
                }
                if let Some(key) = script[at + call.len()..].split('"').next() {
                    used.insert(key.to_owned());
                }
            }
        }
        assert!(used.len() > 10, "{used:?}");
        for key in &used {
            assert!(
                spanish.contains(key),
                "the console asks for {key}, which no catalog has"
            );
        }
        for key in &spanish {
            if let Some(code) = key.strip_prefix("error.")
                && code != "network"
                && code != "generic"
            {
                assert!(
                    gpunex_domain::codes::ErrorCode::ALL
                        .iter()
                        .any(|c| c.as_str() == code),
                    "{key} names no error code"
                );
            }
        }
    }
}
