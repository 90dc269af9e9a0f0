//! Staff roles held by people, and a session acting in a role its person holds
//! (`X-GPUnex-Act-As`, ADR 0009), over real HTTP on both databases: the grant from the command
//! line, a reviewer approving as themselves, an approved applicant acting as their provider and
//! no other, refusals for what is not held, and a revocation taking effect at once.

use axum::http::StatusCode;
use gpunex_api::AppState;
use gpunex_tests::{TestDb, conformance};
use serde_json::{Value, json};

conformance!(
    a_person_acts_only_in_the_roles_they_hold,
    the_command_line_grants_and_revokes_staff_roles
);

mod common;

const GPUNEX: &str = env!("CARGO_BIN_EXE_gpunex");

/// A request with a bearer token and, if given, the role to act in.
async fn call(
    base: &str,
    method: &str,
    path: &str,
    token: &str,
    act_as: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let verb = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut request = reqwest::Client::new()
        .request(verb, format!("{base}{path}"))
        .bearer_auth(token);
    if let Some(role) = act_as {
        request = request.header("x-gpunex-act-as", role);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    common::assert_documented(method, path, status);
    let bytes = response.bytes().await.unwrap();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

async fn grant(state: &AppState, email: &str, role: &str, grant: bool) -> bool {
    use gpunex_domain::accounts::{GrantCommand, StaffRole};
    let role = StaffRole::parse(role).unwrap();
    let by = "tests".to_owned();
    let command = if grant {
        GrantCommand::Grant { role, by }
    } else {
        GrantCommand::Revoke { role, by }
    };
    let change = gpunex_app::accounts::change_staff_role(&state.store, email, command)
        .await
        .unwrap()
        .unwrap();
    // The server's read models follow the log; wait until they hold the change.
    let head = state.store.head_position().await.unwrap();
    state.credentials.wait_for(head).await.unwrap();
    change.changed
}

fn application_form(email: &str) -> Value {
    json!({
        "full_legal_name": "Grace Hopper",
        "email": email,
        "gpus": common::one_h100(),
        "ups_protected": true,
        "commitment_months": 12,
        "maintenance_notes": "none planned"
    })
}

async fn a_person_acts_only_in_the_roles_they_hold(db: &TestDb) {
    let state = AppState::load(db.open().await).await.unwrap();
    let base = common::serve(state.clone()).await;
    let reviewer = common::person(&base, "rita@example.com").await;
    let applicant = common::person(&base, "ana@example.com").await;
    let other = common::person(&base, "otto@example.com").await;

    // Nothing granted: acting as staff is refused, and so is nonsense.
    let (status, me) = call(&base, "GET", "/v1/me", &reviewer, None, None).await;
    assert_eq!(
        (status, me["roles"].clone()),
        (StatusCode::OK, json!(["renter"]))
    );
    let (status, problem) = call(
        &base,
        "GET",
        "/v1/applications",
        &reviewer,
        Some("admin"),
        None,
    )
    .await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("role_not_held")),
        "{problem}"
    );
    for nonsense in ["root", "provider:42", "Admin", ""] {
        let (status, problem) = call(
            &base,
            "GET",
            "/v1/applications",
            &reviewer,
            Some(nonsense),
            None,
        )
        .await;
        assert_eq!(
            (status, problem["code"].as_str()),
            (StatusCode::BAD_REQUEST, Some("invalid_act_as")),
            "{nonsense}: {problem}"
        );
    }

    // Granted: the reviewer reads the queue and approves as themselves.
    assert!(grant(&state, "rita@example.com", "admin", true).await);
    assert!(
        !grant(&state, "rita@example.com", "admin", true).await,
        "a second grant changes nothing"
    );
    let (_, me) = call(&base, "GET", "/v1/me", &reviewer, None, None).await;
    assert_eq!(me["roles"], json!(["renter", "admin"]));
    for token in [&applicant, &other] {
        let email = if token == &applicant {
            "ana@example.com"
        } else {
            "otto@example.com"
        };
        let (status, _) = call(
            &base,
            "POST",
            "/v1/applications",
            token,
            None,
            Some(application_form(email)),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED);
    }
    let (status, queue) = call(
        &base,
        "GET",
        "/v1/applications",
        &reviewer,
        Some("admin"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{queue}");
    let ids: Vec<String> = queue["applications"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["application_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids.len(), 2, "the reviewer sees every application: {queue}");
    // Without the header the same session is only a person, who sees none of them.
    let (_, own) = call(&base, "GET", "/v1/applications", &reviewer, None, None).await;
    assert_eq!(own["applications"], json!([]));
    let mut providers = Vec::new();
    for id in &ids {
        let (status, approved) = call(
            &base,
            "POST",
            &format!("/v1/applications/{id}/approve"),
            &reviewer,
            Some("admin"),
            Some(json!({"tier": "community"})),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{approved}");
        providers.push((
            approved["applicant_user_id"].as_str().unwrap().to_owned(),
            approved["provider_id"].as_str().unwrap().to_owned(),
        ));
    }
    let (_, me) = call(&base, "GET", "/v1/me", &applicant, None, None).await;
    let applicant_id = me["user_id"].as_str().unwrap();
    let own_provider = &providers
        .iter()
        .find(|(user, _)| user == applicant_id)
        .unwrap()
        .1;
    let other_provider = &providers
        .iter()
        .find(|(user, _)| user != applicant_id)
        .unwrap()
        .1;
    assert_eq!(
        me["roles"],
        json!(["renter", format!("provider:{own_provider}")])
    );

    // The approved applicant acts as their provider, and as no other, nor as staff.
    let machines = format!("/v1/providers/{own_provider}/machines");
    let act_own = format!("provider:{own_provider}");
    let (status, fleet) = call(&base, "GET", &machines, &applicant, Some(&act_own), None).await;
    assert_eq!(status, StatusCode::OK, "{fleet}");
    let (status, _) = call(&base, "GET", &machines, &applicant, None, None).await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "a person is not their provider unless they say so"
    );
    let act_other = format!("provider:{other_provider}");
    for role in [act_other.as_str(), "admin", "finance"] {
        let (status, problem) = call(&base, "GET", &machines, &applicant, Some(role), None).await;
        assert_eq!(
            (status, problem["code"].as_str()),
            (StatusCode::FORBIDDEN, Some("role_not_held")),
            "{role}: {problem}"
        );
    }
    // Acting as the provider, they set a price and issue an agent token for it.
    let (status, prices) = call(
        &base,
        "POST",
        &format!("/v1/providers/{own_provider}/prices"),
        &applicant,
        Some(&act_own),
        Some(json!({"model_id": "h100-80gb", "price_usdc": "2.50"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{prices}");
    let (status, issued) = call(
        &base,
        "POST",
        "/v1/tokens",
        &applicant,
        Some(&act_own),
        Some(json!({"role": {"kind": "agent"}})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{issued}");
    assert_eq!(
        issued["role"]["provider_id"].as_str(),
        Some(own_provider.as_str())
    );
    // A role held is still only as wide as the role: the provider is not a reviewer.
    let (status, problem) = call(&base, "GET", "/v1/fleet", &applicant, Some(&act_own), None).await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("forbidden"))
    );

    // Only a person's session acts in another role: a token of any other kind is refused.
    let agent = issued["token"].as_str().unwrap();
    let (status, problem) = call(
        &base,
        "GET",
        "/v1/agent/identity",
        agent,
        Some(&act_own),
        None,
    )
    .await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("role_not_held")),
        "{problem}"
    );

    // Revoked: the next request is refused.
    assert!(grant(&state, "rita@example.com", "admin", false).await);
    let (status, problem) = call(
        &base,
        "GET",
        "/v1/applications",
        &reviewer,
        Some("admin"),
        None,
    )
    .await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("role_not_held"))
    );
    let (_, me) = call(&base, "GET", "/v1/me", &reviewer, None, None).await;
    assert_eq!(me["roles"], json!(["renter"]));
}

async fn the_command_line_grants_and_revokes_staff_roles(db: &TestDb) {
    let state = AppState::load(db.open().await).await.unwrap();
    let base = common::serve(state.clone()).await;
    common::person(&base, "fiona@example.com").await;
    let run = |args: &[&str]| {
        std::process::Command::new(GPUNEX)
            .args(args)
            .env("DATABASE_URL", &db.url)
            .output()
            .unwrap()
    };
    let output = run(&[
        "admin",
        "grant",
        "--email",
        "Fiona@example.com",
        "--role",
        "finance",
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(
        printed.contains("changed; staff roles now: finance"),
        "{printed}"
    );
    let output = run(&[
        "admin",
        "grant",
        "--email",
        "fiona@example.com",
        "--role",
        "treasury",
    ]);
    assert!(String::from_utf8_lossy(&output.stdout).contains("finance, treasury"));
    let output = run(&[
        "admin",
        "revoke",
        "--email",
        "fiona@example.com",
        "--role",
        "finance",
    ]);
    assert!(String::from_utf8_lossy(&output.stdout).contains("changed; staff roles now: treasury"));
    let output = run(&[
        "admin",
        "revoke",
        "--email",
        "fiona@example.com",
        "--role",
        "finance",
    ]);
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("unchanged; staff roles now: treasury")
    );
    // An address with no account, or no address at all: a clear error and nothing written.
    let head = state.store.head_position().await.unwrap();
    for email in ["nobody@example.com", "not an address"] {
        let output = run(&["admin", "grant", "--email", email, "--role", "admin"]);
        assert!(!output.status.success());
        let said = String::from_utf8_lossy(&output.stderr);
        assert!(
            said.contains("no account has this email") || said.contains("--email"),
            "{said}"
        );
    }
    assert_eq!(state.store.head_position().await.unwrap(), head);
    // The events say who holds what, as an auditor reads them.
    let events = state.store.read_all(0, 1_000).await.unwrap();
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e.event_type.as_str())
        .filter(|t| t.starts_with("account.role_"))
        .collect();
    assert_eq!(
        kinds,
        [
            "account.role_granted",
            "account.role_granted",
            "account.role_revoked"
        ]
    );
}
