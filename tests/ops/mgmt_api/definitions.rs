//! Definitions: export and import round trip.

use super::*;

#[tokio::test]
async fn definitions_export_and_import_round_trip() {
    let (_server, client) = start().await;
    call(&client, "PUT", "/api/vhosts/prod", None).await;
    call(
        &client,
        "PUT",
        "/api/exchanges/prod/events",
        Some(json!({"type": "fanout"})),
    )
    .await;
    call(
        &client,
        "PUT",
        "/api/queues/prod/audit",
        Some(json!({"arguments": {"x-max-length": 10}})),
    )
    .await;
    call(
        &client,
        "POST",
        "/api/bindings/prod/e/events/q/audit",
        Some(json!({"routing_key": "k"})),
    )
    .await;
    call(
        &client,
        "PUT",
        "/api/policies/prod/TTL",
        Some(json!({"pattern": ".*", "definition": {"message-ttl": 60000}, "apply-to": "queues"})),
    )
    .await;
    call(
        &client,
        "PUT",
        "/api/operator-policies/prod/cap",
        Some(json!({"pattern": ".*", "definition": {"max-length": 100}, "apply-to": "queues"})),
    )
    .await;
    let defs = get_json(&client, "/api/definitions").await;
    assert_eq!(
        defs["queues"],
        json!([{"name": "audit", "vhost": "prod", "durable": true,
        "auto_delete": false, "arguments": {"x-max-length": 10}}])
    );
    assert_eq!(
        defs["exchanges"],
        json!([{"name": "events", "vhost": "prod", "type": "fanout",
        "durable": true, "auto_delete": false, "internal": false, "arguments": {}}])
    );
    assert_eq!(
        defs["bindings"],
        json!([{"source": "events", "vhost": "prod",
        "destination": "audit", "destination_type": "queue", "routing_key": "k",
        "arguments": {}}])
    );
    assert_eq!(defs["policies"][0]["name"], "TTL");
    assert_eq!(defs["parameters"][0]["component"], "operator_policy");
    assert_eq!(defs["users"][0]["name"], "guest");

    let (other, other_client) = start().await;
    let a = call(
        &other_client,
        "POST",
        "/api/definitions",
        Some(defs.clone()),
    )
    .await;
    assert_eq!(a.status, 204, "{}", a.body);
    let again = get_json(&other_client, "/api/definitions").await;
    for key in [
        "vhosts",
        "users",
        "permissions",
        "queues",
        "exchanges",
        "bindings",
        "policies",
        "parameters",
    ] {
        assert_eq!(again[key], defs[key], "{key}");
    }
    let bad = json!({"queues": [{"name": "q", "vhost": "/", "arguments": {"x-expires": 0}}]});
    let a = call(&other_client, "POST", "/api/definitions", Some(bad)).await;
    assert_eq!(a.status, 400);
    assert!(a.reason().contains("x-expires"), "{}", a.reason());
    drop(other);
}

/// S-MGMT-9: a definitions file larger than axum's default 2 MB (500 queues with long
/// names and a 3 MB global parameter, which an import names in its warnings without
/// applying it, S-DEFS-2) imports; a body above RabbitMQ's 20,000,000-byte limit gets 413.
#[tokio::test]
async fn s_mgmt_9_a_definitions_file_of_several_megabytes_imports() {
    let (_server, client) = start().await;
    let queues: Vec<Value> = (0..500)
        .map(|i| {
            json!({"name": format!("{i:05}-{}", "q".repeat(240)), "vhost": "/",
            "durable": true, "auto_delete": false, "arguments": {}})
        })
        .collect();
    let defs = json!({ "queues": queues,
        "global_parameters": [{"name": "note", "value": "n".repeat(3_000_000)}] });
    assert!(defs.to_string().len() > 3_000_000);
    let a = call(&client, "POST", "/api/definitions", Some(defs)).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let back = get_json(&client, "/api/definitions").await;
    assert_eq!(back["queues"].as_array().map(Vec::len), Some(500));

    let huge = json!({ "queues": [], "padding": "x".repeat(20_000_001) });
    let a = call(&client, "POST", "/api/definitions", Some(huge)).await;
    assert_eq!(a.status, 413, "{}", a.body);
}
