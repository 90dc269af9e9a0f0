//! `GET /agent/install.sh`: the agent installer the guide's one-liner runs
//! (`curl -fsSL https://<platform>/agent/install.sh | bash`), with this platform's public URL and
//! its agent image filled in. The script is `agent/docker/install.sh`, embedded in the binary.

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

const SCRIPT: &str = include_str!("../../agent/docker/install.sh");

/// The image the installer starts when the operator names none: the agent of this release.
pub fn default_image() -> String {
    format!("gpunex/agent:{}", env!("CARGO_PKG_VERSION"))
}

/// The rendered installer.
#[derive(Debug, Clone)]
pub struct Installer {
    script: std::sync::Arc<str>,
}

/// Whether `text` can stand between single quotes in the script unchanged and names what it
/// should (a URL, an image reference): printable ASCII without quotes, backslashes, `$` or
/// backquotes.
fn shell_safe(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_graphic() && !matches!(b, b'\'' | b'"' | b'\\' | b'$' | b'`'))
}

impl Installer {
    /// The script for the platform at `server_url` and the agent image `image`.
    pub fn new(server_url: &str, image: &str) -> anyhow::Result<Installer> {
        let server_url = server_url.trim_end_matches('/');
        anyhow::ensure!(
            shell_safe(server_url)
                && (server_url.starts_with("http://") || server_url.starts_with("https://")),
            "the public URL `{server_url}` cannot be written into the agent installer: an http(s) URL without quotes, `$` or backslashes"
        );
        anyhow::ensure!(
            shell_safe(image),
            "the agent image `{image}` is not an image reference"
        );
        Ok(Installer::render(server_url, image))
    }

    fn render(server_url: &str, image: &str) -> Installer {
        let script = SCRIPT
            .replacen("'@GPUNEX_SERVER_URL@'", &format!("'{server_url}'"), 1)
            .replacen("'@GPUNEX_AGENT_IMAGE@'", &format!("'{image}'"), 1);
        Installer {
            script: script.into(),
        }
    }
}

impl Default for Installer {
    /// For a server on the default address with this release's image (what `serve` replaces
    /// with its public URL).
    fn default() -> Installer {
        Installer::render("http://127.0.0.1:8080", &default_image())
    }
}

impl Installer {
    /// The answer to `GET /agent/install.sh`.
    pub fn response(&self) -> Response {
        script_response(&self.script)
    }
}

fn script_response(script: &str) -> Response {
    let mut response = script.to_owned().into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/x-shellscript; charset=utf-8"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_platform_fills_in_its_url_and_image_and_nothing_unsafe() {
        let installer =
            Installer::new("https://api.gpunex.example/", "gpunex/agent:1.2.3").unwrap();
        assert!(
            installer
                .script
                .contains("server='https://api.gpunex.example'\n")
        );
        assert!(installer.script.contains("image='gpunex/agent:1.2.3'\n"));
        assert!(!installer.script.contains("'@GPUNEX_"));
        assert!(installer.script.starts_with("#!/usr/bin/env bash\n"));
        for (url, image) in [
            ("https://x.example/'; rm -rf /; '", "gpunex/agent:1"),
            ("https://x.example/$(id)", "gpunex/agent:1"),
            ("ftp://x.example", "gpunex/agent:1"),
            ("https://x.example", "gpunex/agent:1 --privileged"),
            ("https://x.example", ""),
        ] {
            assert!(Installer::new(url, image).is_err(), "{url} {image}");
        }
    }
}
