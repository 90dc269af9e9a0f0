//! Documentation the server serves itself, so the `type` of a problem document resolves on the
//! server that answered: `GET /docs/errors` is `docs/errors.md` (embedded in the binary) as a
//! page, one table row per code with the code as its anchor.

use std::sync::LazyLock;

use axum::response::Html;

/// The error table as written in the repository.
pub const ERRORS_MARKDOWN: &str = include_str!("../../docs/errors.md");

static ERRORS_PAGE: LazyLock<String> = LazyLock::new(|| render(ERRORS_MARKDOWN));

/// `GET /docs/errors`
#[utoipa::path(
    get,
    path = "/docs/errors",
    operation_id = "errors",
    tag = "operations",
    summary = "the error codes: every code a problem document can carry, its status and meaning",
    responses((status = 200, description = "the error table as a page", content_type = "text/html", body = String)),
)]
pub async fn errors() -> Html<&'static str> {
    Html(ERRORS_PAGE.as_str())
}

/// The rows of the error table: `(code, status, meaning)`.
pub fn error_rows(markdown: &str) -> Vec<(String, String, String)> {
    markdown
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line
                .strip_prefix('|')?
                .strip_suffix('|')?
                .split('|')
                .map(str::trim)
                .collect();
            let [code, status, meaning] = cells.as_slice() else {
                return None;
            };
            let code = code.strip_prefix('`')?.strip_suffix('`')?;
            Some((
                (*code).to_owned(),
                (*status).to_owned(),
                (*meaning).to_owned(),
            ))
        })
        .collect()
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Inline markdown of the table and the prose: `code` spans only.
fn inline(text: &str) -> String {
    let mut out = String::new();
    for (index, part) in escape(text).split('`').enumerate() {
        if index % 2 == 1 {
            out.push_str("<code>");
            out.push_str(part);
            out.push_str("</code>");
        } else {
            out.push_str(part);
        }
    }
    out
}

/// A page of the markdown: headings, paragraphs, list items, code blocks and the table.
fn render(markdown: &str) -> String {
    let mut body = String::new();
    let mut in_code = false;
    // The paragraph or list item being gathered, and whether it is a list item.
    let mut pending: Vec<&str> = Vec::new();
    let mut item = false;
    let flush = |pending: &mut Vec<&str>, item: bool, body: &mut String| {
        if !pending.is_empty() {
            let (open, close) = if item {
                ("<li>", "</li>\n")
            } else {
                ("<p>", "</p>\n")
            };
            body.push_str(open);
            body.push_str(&inline(&pending.join(" ")));
            body.push_str(close);
            pending.clear();
        }
    };
    for line in markdown.lines() {
        if line.starts_with("```") {
            flush(&mut pending, item, &mut body);
            body.push_str(if in_code { "</pre>\n" } else { "<pre>" });
            in_code = !in_code;
        } else if in_code {
            body.push_str(&escape(line));
            body.push('\n');
        } else if let Some(title) = line.strip_prefix("# ") {
            flush(&mut pending, item, &mut body);
            body.push_str(&format!("<h1>{}</h1>\n", inline(title)));
        } else if let Some(text) = line.strip_prefix("- ") {
            flush(&mut pending, item, &mut body);
            item = true;
            pending.push(text.trim());
        } else if line.starts_with('|') || line.trim().is_empty() {
            flush(&mut pending, item, &mut body);
            item = false;
        } else {
            pending.push(line.trim());
        }
    }
    flush(&mut pending, item, &mut body);
    body.push_str("<table>\n<tr><th>code</th><th>status</th><th>meaning</th></tr>\n");
    for (code, status, meaning) in error_rows(markdown) {
        let code = escape(&code);
        body.push_str(&format!(
            "<tr id=\"{code}\"><td><a href=\"#{code}\"><code>{code}</code></a></td><td>{}</td><td>{}</td></tr>\n",
            escape(&status),
            inline(&meaning)
        ));
    }
    body.push_str("</table>\n");
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>GPUnex error codes</title>\
         <style>body{{font-family:sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem}}\
         td,th{{text-align:left;vertical-align:top;padding:.2rem .5rem}}tr:target{{background:#ffd}}</style>\
         </head><body>\n{body}</body></html>\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{ErrorCode, status_of};

    /// `docs/errors.md` and the code agree both ways: every code is documented once with its
    /// status, and every documented code exists.
    #[test]
    fn the_error_table_is_the_closed_list() {
        let rows = error_rows(ERRORS_MARKDOWN);
        let documented: Vec<&str> = rows.iter().map(|(code, _, _)| code.as_str()).collect();
        let listed: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(
            documented, listed,
            "docs/errors.md lists the codes in the enum's order"
        );
        for (code, status, meaning) in &rows {
            let Some(code) = ErrorCode::parse(code) else {
                panic!("{code} is documented but not a code");
            };
            assert_eq!(
                status,
                &status_of(code).as_u16().to_string(),
                "the status of {code} in docs/errors.md"
            );
            assert!(!meaning.is_empty(), "{code} has no meaning");
        }
    }

    #[test]
    fn the_page_anchors_every_code() {
        let page = render(ERRORS_MARKDOWN);
        for code in ErrorCode::ALL {
            assert!(page.contains(&format!("id=\"{code}\"")), "{code}");
        }
    }
}
