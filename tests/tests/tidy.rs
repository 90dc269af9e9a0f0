//! Architecture rules checked as ordinary tests: the arrows of the design stay pointing one way.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}

fn assert_absent(crate_dir: &str, forbidden: &[&str], why: &str) {
    for file in rust_files(&root().join(crate_dir).join("src")) {
        let text = std::fs::read_to_string(&file).unwrap();
        for needle in forbidden {
            assert!(
                !text.contains(needle),
                "{} contains `{needle}`: {why}",
                file.display()
            );
        }
    }
}

#[test]
fn the_domain_and_the_folds_are_pure() {
    let impure = [
        "Utc::now",
        "SystemTime",
        "Instant::now",
        "now_v7",
        "new_v4",
        "tokio",
        "sqlx",
        "std::fs",
        "std::net",
        "std::env",
        "println!",
        "tracing",
        "rand::",
        " f64",
        " f32",
    ];
    assert_absent(
        "domain",
        &impure,
        "the domain takes time and ids as arguments and does no IO",
    );
    assert_absent(
        "projections",
        &impure,
        "projections are pure folds; the store does the IO",
    );
}

#[test]
fn only_the_store_speaks_sql() {
    for krate in ["domain", "projections", "wire", "app", "api", "gpunex"] {
        assert_absent(
            krate,
            &["sqlx::", "SELECT ", "INSERT INTO"],
            "SQL lives only in the store crate",
        );
    }
    // The agent never touches the platform's database; its own durable queue (a local SQLite
    // file) is SQL in exactly one module.
    for file in rust_files(&root().join("agent/src")) {
        if file.ends_with("queue.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        for needle in ["sqlx", "SELECT ", "INSERT INTO", "rusqlite::Connection"] {
            assert!(
                !text.contains(needle),
                "{} contains `{needle}`: the agent's SQL lives in agent/src/queue.rs",
                file.display()
            );
        }
    }
}

#[test]
fn the_domain_depends_on_nothing_with_io() {
    let manifest = std::fs::read_to_string(root().join("domain/Cargo.toml")).unwrap();
    let dependencies = manifest
        .split("[dependencies]")
        .nth(1)
        .unwrap()
        .split("\n[")
        .next()
        .unwrap();
    // chrono and chrono-tz for calendar arithmetic and time zones only: `Utc::now` is refused
    // above, so no clock is read. utoipa only as the optional `schema` feature: derives of the
    // OpenAPI schemas of types that cross the network, no code at run time.
    let allowed = [
        "utoipa",
        "serde",
        "serde_json",
        "uuid",
        "rust_decimal",
        "thiserror",
        "chrono",
        "chrono-tz",
    ];
    for line in dependencies.lines().filter(|l| l.contains('=')) {
        let name = line.split(['.', '=', ' ']).next().unwrap();
        assert!(
            allowed.contains(&name),
            "domain depends on `{name}`; allowed: {allowed:?}"
        );
    }
}

#[test]
fn every_event_type_is_documented() {
    let catalog = std::fs::read_to_string(root().join("docs/events.md")).unwrap();
    for spec in gpunex_domain::EVENT_CATALOG {
        for version in spec.oldest_version..=spec.current_version {
            let heading = format!("`{}` v{}", spec.event_type, version);
            assert!(
                catalog.contains(&heading),
                "docs/events.md has no section {heading}"
            );
        }
    }
}

/// The ledger decodes only the types in `JOURNAL_EVENT_TYPES`; the catalog says "Moves money"
/// in the section of each of them and of no other type.
#[test]
fn the_catalog_says_which_types_move_money() {
    let catalog = std::fs::read_to_string(root().join("docs/events.md")).unwrap();
    let mut sections = 0;
    for section in catalog.split("\n### `").skip(1) {
        let event_type = section.split('`').next().unwrap();
        let says = section
            .split("\n## ")
            .next()
            .unwrap()
            .contains("Moves money");
        assert_eq!(
            says,
            gpunex_domain::events::posts_journal(event_type),
            "docs/events.md on `{event_type}`"
        );
        sections += 1;
    }
    assert!(sections >= gpunex_domain::EVENT_CATALOG.len(), "{sections}");
}

#[test]
fn ci_runs_the_readme_test_command() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    let command = "bash scripts/test.sh";
    assert!(readme.contains(command), "README.md shows `{command}`");
    assert!(
        ci.lines().any(|l| l.trim().starts_with(command)),
        ".ci/run runs `{command}`"
    );
    let script = std::fs::read_to_string(root().join("scripts/test.sh")).unwrap();
    assert!(
        script.contains("cargo test --workspace --locked")
            && script.contains("scripts/contract.sh"),
        "scripts/test.sh runs cargo's tests and the contract checks"
    );
}

/// Error codes are one closed list (`gpunex_domain::codes::ErrorCode`, explained in
/// `docs/errors.md`): no crate names a code as a bare string, and every code is documented.
#[test]
fn error_codes_come_from_the_closed_list() {
    for crate_dir in ["domain", "store", "payouts", "app", "api", "gpunex"] {
        assert_absent(
            crate_dir,
            &[" code: \"", "fn code(&self) -> &'static str"],
            "an error code is an `ErrorCode`, not a string",
        );
    }
    let table = std::fs::read_to_string(root().join("docs/errors.md")).unwrap();
    for code in gpunex_domain::codes::ErrorCode::ALL {
        assert!(
            table.contains(&format!("| `{code}` |")),
            "docs/errors.md has no row for `{code}`"
        );
    }
}

/// Handlers take path, query and body through the crate's own extractors, which answer with
/// problem documents, never the framework's plain-text rejections.
#[test]
fn handlers_use_the_extractors_with_problem_rejections() {
    assert_absent(
        "api",
        &[
            "extract::Path<",
            "extract::Query<",
            "extract::Json",
            "use axum::Json",
            "use axum::{Json",
            "use axum::extract::{Path",
            "use axum::extract::Query",
        ],
        "use crate::params::{Path, Query} and crate::json::Json",
    );
}

/// Time is passed in: the platform reads the wall clock in exactly one place, the store's
/// `SystemClock`, which the binary's entry point hands to the store and everything after it.
/// Logic takes a `Clock` or an instant, so tests and the simulation move time instead of
/// sleeping. (Monotonic `Instant`s, which measure durations and never date anything, are
/// allowed.) The agent is its own program on provider hosts and reads its own wall clock in one
/// place too, `agent/src/clock.rs`.
#[test]
fn only_the_system_clock_reads_the_wall_clock() {
    let wall_clock = [
        "Utc::now",
        "Local::now",
        "SystemTime::now",
        "UNIX_EPOCH.elapsed",
        "OffsetDateTime::now",
    ];
    let allowed = [
        root().join("store/src/clock.rs"),
        root().join("agent/src/clock.rs"),
    ];
    for krate in [
        "domain",
        "projections",
        "store",
        "wire",
        "payouts",
        "api",
        "gpunex",
        "agent",
        "gpu",
    ] {
        for file in rust_files(&root().join(krate).join("src")) {
            if allowed.contains(&file) {
                continue;
            }
            let text = std::fs::read_to_string(&file).unwrap();
            for needle in wall_clock {
                assert!(
                    !text.contains(needle),
                    "{} reads the wall clock (`{needle}`): take a `Clock` or an instant",
                    file.display()
                );
            }
        }
    }
}

/// `unsafe` lives in one module of the workspace, the suite's FFI to CUDA (ADR 0011): every
/// other crate forbids it (the workspace lint), and in `gpunex-gpu` only `src/cuda.rs` allows it.
#[test]
fn unsafe_code_is_confined_to_the_cuda_module() {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    assert!(manifest.contains("unsafe_code = \"forbid\""));
    let members = manifest
        .split("members = [")
        .nth(1)
        .unwrap()
        .split(']')
        .next()
        .unwrap()
        .split(',')
        .map(|m| m.trim().trim_matches('"').to_owned())
        .filter(|m| !m.is_empty())
        .collect::<Vec<_>>();
    for member in members {
        let crate_manifest =
            std::fs::read_to_string(root().join(&member).join("Cargo.toml")).unwrap();
        if member == "gpu" {
            assert!(crate_manifest.contains("unsafe_code = \"deny\""));
            for file in rust_files(&root().join("gpu/src")) {
                let text = std::fs::read_to_string(&file).unwrap();
                if file.ends_with("cuda.rs") {
                    assert!(text.contains("#![allow(unsafe_code)]"));
                    continue;
                }
                assert!(
                    !text.contains("allow(unsafe_code)") && !text.contains("unsafe {"),
                    "{} uses unsafe outside gpu/src/cuda.rs",
                    file.display()
                );
            }
        } else {
            assert!(
                crate_manifest.contains("[lints]\nworkspace = true"),
                "{member} does not take the workspace's lints (unsafe_code = forbid)"
            );
        }
    }
}

/// The modules of a crate that `crate::` paths in `file` name (directly, or through a `pub use`
/// of the crate root), ignoring its tests.
fn module_references(
    text: &str,
    modules: &std::collections::BTreeSet<String>,
    reexports: &std::collections::BTreeMap<String, String>,
) -> std::collections::BTreeSet<String> {
    let code: String = text
        .split("#[cfg(test)]")
        .next()
        .unwrap_or_default()
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let code = code.as_str();
    let word = regex::Regex::new(r"\w+").unwrap();
    let resolve = |name: &str| {
        if modules.contains(name) {
            Some(name.to_owned())
        } else {
            reexports.get(name).cloned()
        }
    };
    let mut found = std::collections::BTreeSet::new();
    for path in regex::Regex::new(r"crate::(\w+)")
        .unwrap()
        .captures_iter(code)
    {
        found.extend(resolve(&path[1]));
    }
    for group in regex::Regex::new(r"crate::\{([^}]*)\}")
        .unwrap()
        .captures_iter(code)
    {
        for name in word.find_iter(&group[1]) {
            found.extend(resolve(name.as_str()));
        }
    }
    found
}

/// The import cycles among the top-level modules of the crate whose sources are in `src` (each
/// cycle as its sorted members).
fn module_cycles(src: &Path) -> Vec<Vec<String>> {
    use std::collections::{BTreeMap, BTreeSet};
    let modules: BTreeSet<String> = std::fs::read_dir(src)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            let module = name.strip_suffix(".rs")?.to_owned();
            (module != "lib" && module != "main").then_some(module)
        })
        .collect();
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap_or_default();
    let mut reexports = BTreeMap::new();
    let word = regex::Regex::new(r"\w+").unwrap();
    for used in regex::Regex::new(r"pub use (\w+)::\{?([^;]*?)\}?;")
        .unwrap()
        .captures_iter(&lib)
    {
        if modules.contains(&used[1]) {
            for name in word.find_iter(&used[2]) {
                reexports.insert(name.as_str().to_owned(), used[1].to_owned());
            }
        }
    }
    let edges: BTreeMap<String, BTreeSet<String>> = modules
        .iter()
        .map(|m| {
            let text = std::fs::read_to_string(src.join(format!("{m}.rs"))).unwrap();
            let mut refs = module_references(&text, &modules, &reexports);
            refs.remove(m);
            (m.clone(), refs)
        })
        .collect();
    // Two modules are in one cycle when each reaches the other.
    let reach = |from: &String| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.clone()];
        while let Some(m) = stack.pop() {
            for next in &edges[&m] {
                if seen.insert(next.clone()) {
                    stack.push(next.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> =
        modules.iter().map(|m| (m, reach(m))).collect();
    let mut cycles: Vec<Vec<String>> = Vec::new();
    for m in &modules {
        if !reaches[m].contains(m) || cycles.iter().any(|c| c.contains(m)) {
            continue;
        }
        cycles.push(
            modules
                .iter()
                .filter(|o| *o == m || (reaches[m].contains(*o) && reaches[*o].contains(m)))
                .cloned()
                .collect(),
        );
    }
    cycles
}

/// A reader can follow a crate's modules from the bottom up: no module reaches back to one that
/// uses it. (Modules that only add `impl Store` blocks, like `store/src/fleet.rs`, depend on
/// `store` one way.)
#[test]
fn modules_do_not_import_in_circles() {
    for krate in [
        "domain",
        "store",
        "projections",
        "wire",
        "payouts",
        "app",
        "api",
        "gpunex",
        "agent",
        "gpu",
    ] {
        let cycles = module_cycles(&root().join(krate).join("src"));
        assert!(
            cycles.is_empty(),
            "{krate}/src has import cycles: {cycles:?}"
        );
    }
}

/// The cycle finder finds cycles, through re-exports too (so the test above can fail).
#[test]
fn the_cycle_finder_sees_a_cycle() {
    let dir = std::env::temp_dir().join(format!("gpunex-tidy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let files = [
        ("lib.rs", "mod a;\nmod b;\nmod c;\npub use b::Thing;\n"),
        ("a.rs", "use crate::{c::Other, Thing};\n"),
        (
            "b.rs",
            "pub struct Thing;\nfn f() -> crate::a::X { todo!() }\n",
        ),
        (
            "c.rs",
            "//! Not [`crate::a`].\npub struct Other;\n#[cfg(test)]\nmod tests { use crate::a::X; }\n",
        ),
    ];
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    let cycles = module_cycles(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(cycles, vec![vec!["a".to_owned(), "b".to_owned()]]);
}
