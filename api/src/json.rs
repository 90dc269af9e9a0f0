//! JSON bodies: [`Json`] reads every request body under one policy, and writes responses;
//! the policy is written down
//! in `docs/api.md` ("Request bodies").
//!
//! - `Content-Type: application/json` (or a `+json` type); a charset, if named, is UTF-8.
//! - At most [`REQUEST_BODY_BYTES_MAX`] bytes.
//! - Strict JSON: UTF-8, numbers that fit a 64-bit float, nesting at most 128 deep, and no
//!   object with the same key twice (`duplicate_key`). A number without a fractional part is
//!   the integer it equals (`48.0` is `48`) up to 2^53; beyond, it is not an integer.
//! - Every field must be one the endpoint knows (`unknown_field`).
//! - No string holds a control character (U+0000 to U+001F, U+007F to U+009F) or a
//!   bidirectional embedding, override or isolate (U+202A to U+202E, U+2066 to U+2069), except
//!   that free-text fields ([`FREE_TEXT_FIELDS`]) may hold line feeds, carriage returns and tabs.
//! - Field errors name the field with a JSON Pointer (RFC 6901) into the body, and their messages
//!   say what was expected in words, never a Rust type.

use gpunex_domain::codes::ErrorCode;
use std::cell::RefCell;
use std::collections::HashSet;
use std::fmt;

use axum::extract::{FromRequest, OptionalFromRequest, Request};
use axum::http::header;
use serde::de::{self, DeserializeOwned, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::error::{ApiError, Location};

/// Largest request body, in bytes. Larger is `413 body_too_large`.
pub const REQUEST_BODY_BYTES_MAX: usize = 1024 * 1024;

/// Object keys under which strings are free text a person wrote (line breaks and tabs allowed):
/// a string is free text when any key on its path is one of these.
pub const FREE_TEXT_FIELDS: [&str; 10] = [
    "maintenance_notes",
    "text",
    "reason",
    "evidence",
    "answer",
    "message",
    "notes",
    "description",
    "command",
    "env",
];

/// A JSON body: as an argument, the request body read under the JSON policy; as a return value,
/// the response body (`application/json`).
#[derive(Debug, Clone)]
pub struct Json<T>(pub T);

impl<T: serde::Serialize> axum::response::IntoResponse for Json<T> {
    fn into_response(self) -> axum::response::Response {
        axum::Json(self.0).into_response()
    }
}

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Json<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, _state: &S) -> Result<Json<T>, ApiError> {
        check_content_type(request.headers())?;
        let bytes = read(request).await?;
        decode(&bytes).map(Json)
    }
}

/// An optional body: none when the request has no body (empty, whatever its content type).
impl<T: DeserializeOwned, S: Send + Sync> OptionalFromRequest<S> for Json<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, _state: &S) -> Result<Option<Json<T>>, ApiError> {
        let typed = check_content_type(request.headers());
        let bytes = read(request).await?;
        if bytes.is_empty() {
            return Ok(None);
        }
        typed?;
        decode(&bytes).map(|value| Some(Json(value)))
    }
}
/// An XML body (a bank's status report): `Content-Type: application/xml` or `text/xml`, read
/// under the same size limit and deadline as JSON.
#[derive(Debug, Clone)]
pub struct XmlBody(pub axum::body::Bytes);

impl<S: Send + Sync> FromRequest<S> for XmlBody {
    type Rejection = ApiError;

    async fn from_request(request: Request, _state: &S) -> Result<XmlBody, ApiError> {
        let xml = request
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .map(|v| v.trim().to_ascii_lowercase())
            .is_some_and(|v| v == "application/xml" || v == "text/xml" || v.ends_with("+xml"));
        if !xml {
            return Err(ApiError::UnsupportedMediaTypeXml);
        }
        read(request).await.map(XmlBody)
    }
}

fn check_content_type(headers: &axum::http::HeaderMap) -> Result<(), ApiError> {
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return Err(ApiError::UnsupportedMediaType);
    };
    let text = value.to_str().map_err(|_| ApiError::UnsupportedMediaType)?;
    let mut parts = text.split(';');
    let essence = parts.next().unwrap_or("").trim().to_ascii_lowercase();
    let json = essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"));
    let utf8 = parts.all(|parameter| match parameter.split_once('=') {
        Some((name, value)) if name.trim().eq_ignore_ascii_case("charset") => {
            value.trim().trim_matches('"').eq_ignore_ascii_case("utf-8")
        }
        _ => true,
    });
    if json && utf8 {
        Ok(())
    } else {
        Err(ApiError::UnsupportedMediaType)
    }
}

/// A request's body, at most `REQUEST_BODY_BYTES_MAX` bytes, within the request's body read
/// timeout (`408 request_timeout` past it).
pub async fn read(request: Request) -> Result<axum::body::Bytes, ApiError> {
    let timeout = request
        .extensions()
        .get::<crate::http_server::BodyReadTimeout>()
        .map_or(
            crate::http_server::ServerLimits::default().body_read_timeout,
            |t| t.0,
        );
    let _reading = request
        .extensions()
        .get::<crate::http_server::BodyReading>()
        .map(|reading| reading.start());
    let reading = axum::body::to_bytes(request.into_body(), REQUEST_BODY_BYTES_MAX);
    let Ok(read) = tokio::time::timeout(timeout, reading).await else {
        return Err(ApiError::BodyTimeout {
            seconds: timeout.as_secs(),
        });
    };
    read.map_err(|error| {
        let mut source = std::error::Error::source(&error);
        let mut too_large = false;
        while let Some(cause) = source {
            too_large |= cause.is::<http_body_util::LengthLimitError>();
            source = cause.source();
        }
        if too_large {
            ApiError::BodyTooLarge {
                bytes_max: REQUEST_BODY_BYTES_MAX,
            }
        } else {
            ApiError::BodyUnreadable
        }
    })
}

/// A body under the policy: strict JSON first, then the endpoint's type.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let value = strict_value(bytes)?;
    typed(value)
}

/// Parses `bytes` as strict JSON (see the module documentation) into a value.
pub fn strict_value(bytes: &[u8]) -> Result<Value, ApiError> {
    let refusal = RefCell::new(None);
    let mut path = Vec::new();
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let parsed = Strict {
        path: &mut path,
        refusal: &refusal,
    }
    .deserialize(&mut deserializer)
    .and_then(|value| deserializer.end().map(|()| value));
    match (parsed, refusal.into_inner()) {
        (_, Some(refusal)) => Err(refusal),
        (Ok(value), None) => Ok(value),
        (Err(error), None) => Err(syntax_error(&error)),
    }
}

fn syntax_error(error: &serde_json::Error) -> ApiError {
    let text = error.to_string();
    let reason = text.split(" at line ").next().unwrap_or(&text);
    let message = if reason.contains("recursion limit") {
        "nested more than 128 deep".to_owned()
    } else if reason.contains("number out of range") {
        "a number is too large".to_owned()
    } else if error.is_eof() {
        "the body ends before the JSON does".to_owned()
    } else {
        reason.to_owned()
    };
    ApiError::MalformedJson(format!(
        "{message} (line {}, column {})",
        error.line(),
        error.column()
    ))
}

/// A JSON Pointer (RFC 6901) from path segments.
pub fn pointer<'a>(segments: impl IntoIterator<Item = &'a str>) -> String {
    let mut out = String::new();
    for segment in segments {
        out.push('/');
        out.push_str(&segment.replace('~', "~0").replace('/', "~1"));
    }
    out
}

/// The field error of a string the policy refuses, if it is refused.
fn check_text(path: &[String], text: &str) -> Option<ApiError> {
    let free = path
        .iter()
        .any(|key| FREE_TEXT_FIELDS.contains(&key.as_str()));
    let bad = text.chars().find(|c| {
        let bidi = matches!(*c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}');
        let control = c.is_control() && !(free && matches!(*c, '\n' | '\r' | '\t'));
        bidi || control
    })?;
    Some(ApiError::invalid_in(
        Location::Body,
        &pointer(path.iter().map(String::as_str)),
        ErrorCode::ForbiddenCharacter,
        format!(
            "must not contain the control or bidirectional-override character U+{:04X}",
            u32::from(bad)
        ),
    ))
}

/// Deserializes any JSON value into `Value`, refusing what the policy refuses; the first
/// refusal is kept in `refusal` (the parser's own error then only stops the parse).
struct Strict<'a> {
    path: &'a mut Vec<String>,
    refusal: &'a RefCell<Option<ApiError>>,
}

impl Strict<'_> {
    fn refuse<E: de::Error>(&self, error: ApiError) -> E {
        self.refusal.borrow_mut().get_or_insert(error);
        E::custom("refused by the JSON policy")
    }
}

impl<'de> DeserializeSeed<'de> for Strict<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Strict<'_> {
    type Value = Value;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a JSON value")
    }

    fn visit_bool<E>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_u64<E>(self, value: u64) -> Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Value, E> {
        // A number with no fractional part is the integer it equals (as in JSON Schema, where
        // `48.0` is an `integer`), where that is exact: up to 2^53 in size. Larger floats stand
        // for several integers at once and stay floats (refused where an integer is due).
        const EXACT_INTEGER_MAX: f64 = 9_007_199_254_740_992.0;
        if value.fract() == 0.0 && value.abs() <= EXACT_INTEGER_MAX {
            return Ok(Value::from(value as i64));
        }
        serde_json::Number::from_f64(value)
            .map(Value::Number)
            .ok_or_else(|| E::custom("number out of range"))
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<Value, E> {
        match check_text(self.path, value) {
            Some(refusal) => Err(self.refuse(refusal)),
            None => Ok(Value::String(value.to_owned())),
        }
    }

    fn visit_string<E: de::Error>(self, value: String) -> Result<Value, E> {
        match check_text(self.path, &value) {
            Some(refusal) => Err(self.refuse(refusal)),
            None => Ok(Value::String(value)),
        }
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        loop {
            self.path.push(items.len().to_string());
            let item = seq.next_element_seed(Strict {
                path: self.path,
                refusal: self.refusal,
            });
            self.path.pop();
            match item? {
                Some(item) => items.push(item),
                None => return Ok(Value::Array(items)),
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = serde_json::Map::new();
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            self.path.push(key.clone());
            if let Some(refusal) = check_text(self.path, &key) {
                return Err(self.refuse(refusal));
            }
            if !seen.insert(key.clone()) {
                let at = pointer(self.path.iter().map(String::as_str));
                return Err(self.refuse(ApiError::invalid_in(
                    Location::Body,
                    &at,
                    ErrorCode::DuplicateKey,
                    "appears more than once in its object",
                )));
            }
            let value = map.next_value_seed(Strict {
                path: self.path,
                refusal: self.refusal,
            });
            self.path.pop();
            object.insert(key, value?);
        }
        Ok(Value::Object(object))
    }
}

/// `value` as the endpoint's type: fields it does not know refused, type errors as field errors.
pub fn typed<T: DeserializeOwned>(value: Value) -> Result<T, ApiError> {
    let mut unknown = Vec::new();
    let mut note = |path: serde_ignored::Path| unknown.push(ignored_pointer(&path));
    let deserializer = serde_ignored::Deserializer::new(value, &mut note);
    let result: Result<T, _> = serde_path_to_error::deserialize(deserializer);
    match result {
        Ok(value) if unknown.is_empty() => Ok(value),
        Ok(_) => Err(ApiError::InvalidRequest(
            unknown
                .into_iter()
                .map(|at| {
                    crate::error::field_error(
                        Location::Body,
                        &at,
                        ErrorCode::UnknownField,
                        "is not a field of this request",
                    )
                })
                .collect(),
        )),
        Err(error) => {
            let segments: Vec<String> = error
                .path()
                .iter()
                .filter_map(|segment| match segment {
                    serde_path_to_error::Segment::Map { key } => Some(key.clone()),
                    serde_path_to_error::Segment::Seq { index } => Some(index.to_string()),
                    _ => None,
                })
                .collect();
            Err(type_error(segments, &error.into_inner().to_string()))
        }
    }
}

fn ignored_pointer(path: &serde_ignored::Path) -> String {
    fn collect(path: &serde_ignored::Path, out: &mut Vec<String>) {
        match path {
            serde_ignored::Path::Root => {}
            serde_ignored::Path::Seq { parent, index } => {
                collect(parent, out);
                out.push(index.to_string());
            }
            serde_ignored::Path::Map { parent, key } => {
                collect(parent, out);
                out.push(key.clone());
            }
            serde_ignored::Path::Some { parent }
            | serde_ignored::Path::NewtypeStruct { parent }
            | serde_ignored::Path::NewtypeVariant { parent } => collect(parent, out),
        }
    }
    let mut segments = Vec::new();
    collect(path, &mut segments);
    pointer(segments.iter().map(String::as_str))
}

/// The field error of a value that does not fit the endpoint's type, from serde's message.
fn type_error(mut segments: Vec<String>, message: &str) -> ApiError {
    let quoted = |text: &str| text.split('`').nth(1).map(str::to_owned);
    let (code, text) = if let Some(rest) = message.strip_prefix("missing field ") {
        if let Some(field) = quoted(rest) {
            segments.push(field);
        }
        (ErrorCode::MissingField, "is required".to_owned())
    } else if let Some(rest) = message.strip_prefix("unknown field ") {
        // serde_path_to_error has already entered the key when the type refuses it.
        if let Some(field) = quoted(rest)
            && segments.last() != Some(&field)
        {
            segments.push(field);
        }
        let expected = rest
            .split_once(", expected ")
            .map(|(_, expected)| format!("; expected {}", expected.trim_end_matches('.')))
            .unwrap_or_default();
        (
            ErrorCode::UnknownField,
            format!("is not a field here{expected}"),
        )
    } else if let Some(rest) = message.strip_prefix("unknown variant ") {
        let (given, expected) = rest
            .split_once(", expected ")
            .unwrap_or((rest, "another value"));
        (
            ErrorCode::UnknownValue,
            format!("{given} is not allowed; expected {expected}"),
        )
    } else if let Some(rest) = message.strip_prefix("invalid type: ") {
        let (given, expected) = rest
            .split_once(", expected ")
            .unwrap_or((rest, "another type"));
        (
            ErrorCode::InvalidType,
            format!("expected {}, got {given}", in_words(expected)),
        )
    } else if let Some(rest) = message.strip_prefix("invalid value: ") {
        let (given, expected) = rest
            .split_once(", expected ")
            .unwrap_or((rest, "another value"));
        (
            ErrorCode::InvalidValue,
            format!("expected {}, got {given}", in_words(expected)),
        )
    } else if let Some(rest) = message.strip_prefix("invalid length ") {
        let (given, expected) = rest
            .split_once(", expected ")
            .unwrap_or((rest, "another length"));
        (
            ErrorCode::InvalidLength,
            format!("expected {}, got {given} items", in_words(expected)),
        )
    } else {
        (ErrorCode::InvalidValue, in_words(message))
    };
    ApiError::invalid_in(
        Location::Body,
        &pointer(segments.iter().map(String::as_str)),
        code,
        text,
    )
}

/// serde's description of an expected type, without Rust type names.
fn in_words(expected: &str) -> String {
    let expected = expected.trim();
    let integer = |bits: &str, signed: bool| -> String {
        match (signed, bits) {
            (false, "8") => "a whole number from 0 to 255".to_owned(),
            (false, "16") => "a whole number from 0 to 65535".to_owned(),
            (false, "32") => "a whole number from 0 to 4294967295".to_owned(),
            (false, _) => "a whole number from 0".to_owned(),
            (true, "8") => "a whole number from -128 to 127".to_owned(),
            (true, "16") => "a whole number from -32768 to 32767".to_owned(),
            (true, "32") => "a whole number from -2147483648 to 2147483647".to_owned(),
            (true, _) => "a whole number".to_owned(),
        }
    };
    if let Some(bits) = expected.strip_prefix('u')
        && (bits == "size" || bits.parse::<u32>().is_ok())
    {
        return integer(bits, false);
    }
    if let Some(bits) = expected.strip_prefix('i')
        && (bits == "size" || bits.parse::<u32>().is_ok())
    {
        return integer(bits, true);
    }
    if expected == "f64" || expected == "f32" {
        return "a number".to_owned();
    }
    for (rust, words) in [
        ("internally tagged enum", "an object with a `kind`"),
        ("adjacently tagged enum", "an object with a `kind`"),
        ("struct variant", "an object"),
        ("tuple variant", "an array"),
        ("tuple struct", "an array"),
        ("struct", "an object"),
        ("enum", "one of the documented values"),
        ("a sequence", "an array"),
        ("a map", "an object"),
        ("unit", "null"),
    ] {
        if expected.starts_with(rust) {
            return words.to_owned();
        }
    }
    expected.to_owned()
}

#[cfg(test)]
mod tests {
    /// The patterns the OpenAPI document gives request strings refuse exactly the characters
    /// this policy refuses, in free text and elsewhere.
    #[test]
    fn the_documented_patterns_are_the_policy() {
        let strict = regex::Regex::new(crate::routes::TEXT_PATTERN).unwrap();
        let free = regex::Regex::new(crate::routes::FREE_TEXT_PATTERN).unwrap();
        let path = |key: &str| vec![key.to_owned()];
        let chars = (0_u32..0x3000)
            .chain([0xFEFF, 0xFFFD, 0x1F600, 0x10FFFF])
            .filter_map(char::from_u32);
        for c in chars {
            let text = format!("a{c}b");
            assert_eq!(
                strict.is_match(&text),
                check_text(&path("label"), &text).is_none(),
                "U+{:04X}",
                u32::from(c)
            );
            assert_eq!(
                free.is_match(&text),
                check_text(&path("reason"), &text).is_none(),
                "U+{:04X} in free text",
                u32::from(c)
            );
        }
    }

    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Form {
        name: String,
        count: u32,
        #[serde(default)]
        notes: String,
        #[serde(default)]
        inner: Option<Inner>,
        #[serde(default)]
        role: Option<Kind>,
    }

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Inner {
        items: Vec<u8>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(tag = "kind", rename_all = "snake_case")]
    #[allow(dead_code)]
    enum Kind {
        Admin,
        Agent { id: u32 },
    }

    /// `(field, code)` of the first field error, or of the problem when there is none.
    fn refusal(body: &[u8]) -> (String, String) {
        match decode::<Form>(body) {
            Ok(form) => panic!("accepted: {form:?}"),
            Err(ApiError::InvalidRequest(errors)) => {
                (errors[0].field.clone(), errors[0].code.clone())
            }
            Err(other) => (String::new(), other.code().as_str().to_owned()),
        }
    }

    fn check(body: &str, field: &str, code: &str) {
        assert_eq!(
            refusal(body.as_bytes()),
            (field.to_owned(), code.to_owned()),
            "{body}"
        );
    }

    #[test]
    fn accepts_what_the_policy_allows() {
        let form: Form = decode(
            br#"{"name": "Ada \u00e9 \u05d0", "count": 3, "notes": "line 1\nline 2\ttab",
                "inner": {"items": [1, 2]}, "role": {"kind": "agent", "id": 4}}"#,
        )
        .unwrap();
        assert_eq!(form.count, 3);
        // A whole number written with a fraction is that integer, while it is exact.
        let form: Form = decode(br#"{"name": "a", "count": 48.0}"#).unwrap();
        assert_eq!(form.count, 48);
        let form: Form = decode(br#"{"name": "a", "count": 4.8e1}"#).unwrap();
        assert_eq!(form.count, 48);
    }

    #[test]
    fn only_exact_whole_numbers_count_as_integers() {
        check(r#"{"name": "a", "count": 48.5}"#, "/count", "invalid_type");
        // 2^53 + 2 written as a float: past the exact range, not an integer.
        check(
            r#"{"name": "a", "count": 9007199254740994.0}"#,
            "/count",
            "invalid_type",
        );
    }

    #[test]
    fn refuses_each_case_with_a_pointer() {
        check(
            r#"{"name": "a", "count": 1, "name": "b"}"#,
            "/name",
            "duplicate_key",
        );
        check(
            r#"{"name": "a", "count": 1, "inner": {"items": [], "items": []}}"#,
            "/inner/items",
            "duplicate_key",
        );
        check(
            r#"{"name": "a", "count": 1, "extra": 1}"#,
            "/extra",
            "unknown_field",
        );
        check(
            r#"{"name": "a", "count": 1, "inner": {"items": [], "x": 1}}"#,
            "/inner/x",
            "unknown_field",
        );
        check(r#"{"count": 1}"#, "/name", "missing_field");
        check(r#"{"name": "a", "count": -1}"#, "/count", "invalid_value");
        check(r#"{"name": "a", "count": "1"}"#, "/count", "invalid_type");
        check(
            r#"{"name": "a", "count": 1, "inner": {"items": [1, 300]}}"#,
            "/inner/items/1",
            "invalid_value",
        );
        check(
            r#"{"name": "a", "count": 1, "role": {"kind": "wizard"}}"#,
            "/role/kind",
            "unknown_value",
        );
        check(
            "{\"name\": \"a\u{202E}b\", \"count\": 1}",
            "/name",
            "forbidden_character",
        );
        check(
            r#"{"name": "a\nb", "count": 1}"#,
            "/name",
            "forbidden_character",
        );
        check(
            r#"{"name": "a\u0007", "count": 1}"#,
            "/name",
            "forbidden_character",
        );
        check(
            r#"{"name": "a", "count": 1, "notes": "\u0000"}"#,
            "/notes",
            "forbidden_character",
        );
        check(
            r#"{"a/b~c": 1, "name": "a\u0001", "count": 1}"#,
            "/name",
            "forbidden_character",
        );
        check(
            r#"{"name": "a", "count": 1, "x": 1e999}"#,
            "",
            "malformed_json",
        );
        check(r#"{"name": "a", "count": 1"#, "", "malformed_json");
        check(r#"{"name": "a", "count": 1} {}"#, "", "malformed_json");
        assert_eq!(
            refusal(b"{\"name\": \"\xff\", \"count\": 1}").1,
            "malformed_json",
            "invalid UTF-8"
        );
    }

    #[test]
    fn messages_name_no_rust_types() {
        for body in [
            r#"{"name": "a", "count": "1"}"#,
            r#"{"name": "a", "count": 1, "role": "admin"}"#,
            r#"{"name": "a", "count": 1, "inner": []}"#,
            r#"{"name": "a", "count": 1, "role": {"kind": "wizard"}}"#,
        ] {
            let Err(ApiError::InvalidRequest(errors)) = decode::<Form>(body.as_bytes()) else {
                panic!("{body} accepted");
            };
            let message = &errors[0].message;
            for rust in ["u32", "u8", "struct", "enum", "Kind", "Inner", "Option"] {
                assert!(!message.contains(rust), "{body}: {message}");
            }
        }
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Strict {
        name: String,
        #[serde(default)]
        inner: Option<StrictInner>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct StrictInner {
        count: u32,
    }

    /// A type that refuses unknown fields itself names each one once, at its own place.
    #[test]
    fn unknown_fields_of_strict_types_are_named_once() {
        for (body, field) in [
            (r#"{"name": "a", "colour": 1}"#, "/colour"),
            (
                r#"{"name": "a", "inner": {"count": 1, "colour": 1}}"#,
                "/inner/colour",
            ),
            (
                r#"{"name": "a", "inner": {"count": 1, "inner": 1}}"#,
                "/inner/inner",
            ),
        ] {
            let Err(ApiError::InvalidRequest(errors)) = decode::<Strict>(body.as_bytes()) else {
                panic!("{body} accepted");
            };
            assert_eq!(
                (errors[0].field.as_str(), errors[0].code.as_str()),
                (field, "unknown_field"),
                "{body}"
            );
        }
    }

    #[test]
    fn pointers_escape_tilde_and_slash() {
        assert_eq!(pointer(["a/b", "c~d", "0"]), "/a~1b/c~0d/0");
        assert_eq!(pointer(Vec::<&str>::new()), "");
    }
}
