//! Exchanges, bindings and vhosts.

use super::*;

#[tokio::test]
async fn exchanges_bindings_and_vhosts() {
    let (_server, client) = start().await;
    let a = call(
        &client,
        "PUT",
        "/api/exchanges/%2F/events",
        Some(json!({"type": "topic", "durable": true})),
    )
    .await;
    assert_eq!(a.status, 201, "{}", a.body);
    let a = call(
        &client,
        "PUT",
        "/api/exchanges/%2F/odd",
        Some(json!({"type": "nonsense"})),
    )
    .await;
    assert_eq!(a.status, 400, "{}", a.body);
    let x = get_json(&client, "/api/exchanges/%2F/events").await;
    assert_eq!(x["type"], "topic");
    assert_eq!(x["durable"], true);
    assert_eq!(x["internal"], false);
    let names: Vec<String> = get_json(&client, "/api/exchanges/%2F")
        .await
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(names.contains(&String::new()) && names.contains(&"amq.topic".to_owned()));

    call(&client, "PUT", "/api/queues/%2F/audit", Some(json!({}))).await;
    let a = call(
        &client,
        "POST",
        "/api/bindings/%2F/e/events/q/audit",
        Some(json!({"routing_key": "order.*"})),
    )
    .await;
    assert_eq!(a.status, 201, "{}", a.body);
    let bindings = get_json(&client, "/api/bindings/%2F").await;
    let list = bindings.as_array().unwrap();
    assert!(
        list.contains(&json!({"source": "", "vhost": "/", "destination": "audit",
        "destination_type": "queue", "routing_key": "audit", "arguments": {},
        "properties_key": "audit"}))
    );
    assert!(list.contains(
        &json!({"source": "events", "vhost": "/", "destination": "audit",
        "destination_type": "queue", "routing_key": "order.*", "arguments": {},
        "properties_key": "order.*"})
    ));
    let a = call(
        &client,
        "DELETE",
        "/api/exchanges/%2F/events?if-unused=true",
        None,
    )
    .await;
    assert_eq!(a.status, 400, "{}", a.body);
    assert_eq!(
        call(&client, "DELETE", "/api/exchanges/%2F/events", None)
            .await
            .status,
        204
    );

    assert_eq!(
        call(&client, "PUT", "/api/vhosts/prod", None).await.status,
        201
    );
    assert_eq!(
        call(&client, "PUT", "/api/vhosts/prod", None).await.status,
        204
    );
    let v = get_json(&client, "/api/vhosts/prod").await;
    assert_eq!(v["name"], "prod");
    assert_eq!(v["messages"], 0);
    let names: Vec<Value> = get_json(&client, "/api/vhosts")
        .await
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].clone())
        .collect();
    assert_eq!(names, vec![json!("/"), json!("prod")]);
    let perms = get_json(&client, "/api/permissions").await;
    assert_eq!(
        perms,
        json!([{"user": "guest", "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"}])
    );
    assert_eq!(
        call(&client, "DELETE", "/api/vhosts/prod", None)
            .await
            .status,
        204
    );
    assert_eq!(
        call(&client, "DELETE", "/api/vhosts/prod", None)
            .await
            .status,
        404
    );
}
