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
