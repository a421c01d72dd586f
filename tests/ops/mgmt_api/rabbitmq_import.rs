//! Definitions exported by a real RabbitMQ import into wharf (S-DEFS-1..3, S-TPERM-1): the
//! fixture `tests/ops/fixtures/rabbitmq-3.10-definitions.json` (made with
//! `rabbitmqctl export_definitions` from RabbitMQ 3.10.8 after applying
//! `rabbitmq_topology.json` through its management API) always, and a fresh export when a
//! RabbitMQ with its management plugin answers on localhost:15672 (skipped loudly otherwise).

use super::*;

const VHOST: &str = "wharf-import";

fn fixture(name: &str) -> Value {
    let path = format!("{}/tests/ops/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// The items of `list` in `vhost` (or, for users, named like the topology's), each with only
/// `keys`, sorted: the shape both brokers must agree on.
fn pick(defs: &Value, list: &str, keys: &[&str]) -> Vec<Value> {
    let mut out: Vec<Value> = defs[list]
        .as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .filter(|i| match list {
            "users" => i["name"].as_str().unwrap_or("").starts_with(VHOST),
            _ => i["vhost"] == VHOST,
        })
        .map(|i| {
            let mut m = serde_json::Map::new();
            for k in keys {
                m.insert((*k).to_owned(), normalize(k, &i[*k]));
            }
            Value::Object(m)
        })
        .collect();
    out.sort_by_key(Value::to_string);
    out
}

/// What the two exports may spell differently: RabbitMQ's operator policy definition as
/// `[key, value]` pairs.
fn normalize(key: &str, v: &Value) -> Value {
    match (key, v) {
        ("value", Value::Object(m)) => {
            let mut m = m.clone();
            if let Some(Value::Array(pairs)) = m.get("definition").cloned() {
                let obj: serde_json::Map<String, Value> = pairs
                    .iter()
                    .map(|p| (p[0].as_str().unwrap().to_owned(), p[1].clone()))
                    .collect();
                m.insert("definition".into(), Value::Object(obj));
            }
            Value::Object(m)
        }
        // RabbitMQ 3.10 exports no `internal` for an exchange that is not.
        ("internal", Value::Null) => Value::Bool(false),
        _ => v.clone(),
    }
}

/// Imports `export` into a fresh wharf and checks that wharf's own export of the vhost has
/// the same topology, that the warnings name what was not applied, and that an imported
/// user logs in with its RabbitMQ password.
async fn import_and_compare(export: &Value, app_password: &str) {
    let (server, client) = start().await;
    let a = call(&client, "POST", "/api/definitions", Some(export.clone())).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let warnings: Vec<String> = a.json()["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap().to_owned())
        .collect();
    for needle in [
        "'ha-mode'",
        "'ha-sync-mode'",
        "'queue-mode'",
        "'queue-master-locator'",
        "'x-queue-mode'",
    ] {
        assert_eq!(
            warnings.iter().filter(|w| w.contains(needle)).count(),
            1,
            "{needle} once in {warnings:?}"
        );
    }
    let ours = get_json(&client, "/api/definitions").await;
    for (list, keys) in [
        (
            "queues",
            &["name", "durable", "auto_delete", "arguments"][..],
        ),
        (
            "exchanges",
            &[
                "name",
                "type",
                "durable",
                "auto_delete",
                "internal",
                "arguments",
            ],
        ),
        (
            "bindings",
            &[
                "source",
                "destination",
                "destination_type",
                "routing_key",
                "arguments",
            ],
        ),
        (
            "policies",
            &["name", "pattern", "apply-to", "definition", "priority"],
        ),
        ("parameters", &["component", "name", "value"]),
        ("users", &["name", "tags", "password_hash"]),
        ("permissions", &["user", "configure", "write", "read"]),
        ("topic_permissions", &["user", "exchange", "write", "read"]),
    ] {
        assert_eq!(pick(&ours, list, keys), pick(export, list, keys), "{list}");
    }
    let app = Client::new(&base(&server), "wharf-import-app", app_password);
    assert_eq!(
        get_json(&app, "/api/whoami").await["tags"],
        json!(["management"])
    );
    // The ha-all policy applies to `audit` and adds nothing to what is in effect there (the
    // operator policy's limit is all).
    let audit = get_json(&client, "/api/queues/wharf-import/audit").await;
    assert_eq!(audit["policy"], "ha-all");
    assert_eq!(
        audit["effective_policy_definition"],
        json!({"max-length-bytes": 104_857_600})
    );
}

#[tokio::test]
async fn s_defs_1_a_rabbitmq_3_10_export_imports_with_its_topology() {
    import_and_compare(&fixture("rabbitmq-3.10-definitions.json"), "app-secret").await;
}

/// The export as `rabbitmqctl export_definitions` wrote it, keeping only the topology's vhost
/// and users (the shared RabbitMQ holds others').
fn only_topology(mut defs: Value) -> Value {
    for (key, list) in defs.as_object_mut().unwrap() {
        if let Value::Array(items) = list {
            items.retain(|i| match key.as_str() {
                "vhosts" => i["name"] == VHOST,
                "users" => i["name"].as_str().unwrap_or("").starts_with(VHOST),
                "global_parameters" => true,
                _ => i["vhost"] == VHOST,
            });
        }
    }
    defs
}

/// With a local RabbitMQ (management on localhost:15672, guest/guest, `rabbitmqctl` on the
/// path): the topology is declared there afresh, exported with `rabbitmqctl
/// export_definitions`, and imported into wharf.
#[tokio::test]
async fn s_defs_1_a_fresh_rabbitmq_export_imports_when_rabbitmq_is_here() {
    let rabbit = Client::new("http://127.0.0.1:15672", "guest", "guest");
    let up = {
        let r = rabbit.clone();
        tokio::task::spawn_blocking(move || r.get("/api/overview"))
            .await
            .unwrap()
    };
    if !matches!(&up, Ok(a) if a.status == 200) || which("rabbitmqctl").is_none() {
        eprintln!(
            "SKIPPED s_defs_1_a_fresh_rabbitmq_export_imports_when_rabbitmq_is_here: no RabbitMQ \
             management API on localhost:15672 or no rabbitmqctl (the fixture test still ran)"
        );
        return;
    }
    // Fresh: our own vhost and users from an earlier run go first.
    call(&rabbit, "DELETE", "/api/vhosts/wharf-import", None).await;
    for u in ["wharf-import-app", "wharf-import-watch"] {
        call(&rabbit, "DELETE", &format!("/api/users/{u}"), None).await;
    }
    for step in fixture("rabbitmq_topology.json").as_array().unwrap() {
        let (method, path) = (step[0].as_str().unwrap(), step[1].as_str().unwrap());
        let a = call(&rabbit, method, path, Some(step[2].clone())).await;
        assert!(a.status < 300, "RabbitMQ: {method} {path}: {}", a.body);
    }
    // `-` writes to standard output (the node's user may not write into our temp dirs).
    let out = std::process::Command::new("rabbitmqctl")
        .args(["export_definitions", "-", "--silent"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let defs: Value = serde_json::from_slice(&out.stdout).unwrap();
    import_and_compare(&only_topology(defs), "app-secret").await;
}

fn which(program: &str) -> Option<std::path::PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}
