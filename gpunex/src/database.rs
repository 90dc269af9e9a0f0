//! Opening the platform database a command names, and printing its URL without the password.

use std::path::Path;

use anyhow::Context;
use gpunex_store::{Store, StoreOptions};

/// Opens the configured store and applies migrations. Creates the SQLite file's directory.
pub async fn open_store(database_url: &str) -> anyhow::Result<Store> {
    open_store_with(database_url, StoreOptions::default()).await
}

/// [`open_store`] with other options (the server's clock, say).
pub async fn open_store_with(database_url: &str, options: StoreOptions) -> anyhow::Result<Store> {
    if let Some(path) = database_url.strip_prefix("sqlite://") {
        let path = path.split('?').next().unwrap_or(path);
        if let Some(parent) = Path::new(path)
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
        {
            std::fs::create_dir_all(parent).with_context(|| {
                format!("cannot create the database directory {}", parent.display())
            })?;
        }
    }
    Store::open(database_url, &options)
        .await
        .with_context(|| format!("cannot open the database at {}", redact(database_url)))
}

/// The URL with any password removed, for messages.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let credentials = &url[scheme_end + 3..at];
            match credentials.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme_end + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}
