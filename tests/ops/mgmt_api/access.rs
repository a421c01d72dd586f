//! Authentication (401 with a challenge), RabbitMQ's tag rules (S-MGMT-1), RabbitMQ's 404
//! body, overview and health check.

use super::*;

#[tokio::test]
async fn missing_or_wrong_credentials_get_401_with_a_challenge() {
    let (server, _) = start().await;
    let anon = Client::anonymous(&base(&server));
    let a = call(&anon, "GET", "/api/queues", None).await;
    assert_eq!(a.status, 401);
    assert_eq!(
        a.www_authenticate.as_deref(),
        Some("Basic realm=\"RabbitMQ Management\"")
    );
    assert_eq!(
        a.json(),
        json!({"error": "not_authorized", "reason": "Login failed"})
    );
    let wrong = Client::new(&base(&server), "guest", "nope");
    assert_eq!(call(&wrong, "GET", "/api/overview", None).await.status, 401);
    let unknown = Client::new(&base(&server), "who", "guest");
    assert_eq!(
        call(&unknown, "GET", "/api/overview", None).await.status,
        401
    );
}

/// S-MGMT-1: a user without a management tag is refused everything with RabbitMQ's 401 "Not
/// management user" (RabbitMQ answers 401 here, not 403).
#[tokio::test]
async fn s_mgmt_1_a_user_without_a_management_tag_gets_401() {
    let server = TestServer::start_with(|c| {
        c.mgmt_bind = Some("127.0.0.1:0".to_owned());
        let mut users = Users::default();
        users.0.push(User {
            name: "app".to_owned(),
            password: "pw".to_owned(),
            loopback_only: false,
            vhosts: vec!["/".to_owned()],
            tags: Vec::new(),
            initial_only: false,
        });
        c.users = users;
    })
    .await;
    let app = Client::new(&base(&server), "app", "pw");
    for (method, path) in [
        ("GET", "/api/queues"),
        ("PUT", "/api/policies/%2F/p"),
        ("GET", "/api/definitions"),
    ] {
        let a = call(&app, method, path, Some(json!({}))).await;
        assert_eq!(a.status, 401, "{method} {path}: {}", a.body);
        assert_eq!(
            a.json(),
            json!({"error": "not_authorised", "reason": "Not management user"})
        );
    }
    let users = get_json(&guest(&server), "/api/users").await;
    let tags: Vec<(String, Value)> = users
        .as_array()
        .unwrap()
        .iter()
        .map(|u| (u["name"].as_str().unwrap().to_owned(), u["tags"].clone()))
        .collect();
    assert!(tags.contains(&("guest".to_owned(), json!(["administrator"]))));
    assert!(tags.contains(&("app".to_owned(), json!([]))));
}

#[tokio::test]
async fn unknown_objects_get_rabbitmq_404_body() {
    let (_server, client) = start().await;
    for path in [
        "/api/queues/%2F/nope",
        "/api/exchanges/%2F/nope",
        "/api/policies/%2F/nope",
        "/api/operator-policies/%2F/nope",
        "/api/vhosts/nope",
        "/api/queues/nope",
        "/api/no-such-endpoint",
    ] {
        let a = call(&client, "GET", path, None).await;
        assert_eq!(a.status, 404, "{path}");
        assert_eq!(
            a.json(),
            json!({"error": "Object Not Found", "reason": "Not Found"}),
            "{path}"
        );
    }
    let a = call(&client, "DELETE", "/api/queues/%2F/nope", None).await;
    assert_eq!(a.status, 404);
    let a = call(&client, "DELETE", "/api/policies/%2F/nope", None).await;
    assert_eq!(a.status, 404);
}

#[tokio::test]
async fn overview_and_healthcheck_have_rabbitmq_shapes() {
    let (server, client) = start().await;
    let (_conn, ch) = server.channel().await;
    declare(&ch, "q1").await;
    publish(&ch, "q1", b"x").await;
    let o = get_json(&client, "/api/overview").await;
    assert_eq!(o["object_totals"]["queues"], 1);
    assert_eq!(o["object_totals"]["connections"], 1);
    assert_eq!(o["object_totals"]["channels"], 1);
    assert_eq!(o["queue_totals"]["messages_ready"], 1);
    assert_eq!(o["message_stats"]["publish"], 1);
    assert_eq!(o["product_name"], "wharf");
    assert_eq!(o["listeners"][0]["port"], server.handle.local_addr().port());
    assert_eq!(
        get_json(&client, "/api/healthchecks/node").await,
        json!({"status": "ok"})
    );
}
