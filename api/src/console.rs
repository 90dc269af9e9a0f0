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
const SCRIPT: &str = include_str!("../../console/assets/console.js");
const STYLE: &str = include_str!("../../console/assets/console.css");

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
        .route(
            "/assets/console.js",
            get(|| async { asset("text/javascript; charset=utf-8", SCRIPT) }),
        )
        .route(
            "/assets/console.css",
            get(|| async { asset("text/css; charset=utf-8", STYLE) }),
        )
        .route("/assets/i18n/{file}", get(catalog))
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

fn asset(content_type: &'static str, body: &'static str) -> Response {
    secured(([(header::CONTENT_TYPE, content_type)], body).into_response())
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

async fn catalog(crate::params::Path(file): crate::params::Path<String>) -> Response {
    match CATALOGS
        .iter()
        .find(|(lang, _)| file.strip_suffix(".json") == Some(lang))
    {
        Some((_, body)) => asset("application/json", body),
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
        for (at, call) in SCRIPT.match_indices("t(\"") {
            // `t(` itself, not the end of another name (`split(":")`).
            if SCRIPT[..at]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.')
            {
                continue;
            }
            if let Some(key) = SCRIPT[at + call.len()..].split('"').next() {
                used.insert(key.to_owned());
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
