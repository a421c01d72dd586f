//! RabbitMQ's endpoints that tools call (S-MGMT-1..6, S-TPERM, S-DEFS): tag scopes, list
//! parameters, health checks, nodes, publish, bindings, connections, rates and topic
//! permissions, each answer compared with what RabbitMQ 3.10 answered for the same request.

use super::*;

async fn put_user(client: &Client, name: &str, tags: &str, vhost: &str) {
    put_user_with(client, name, tags, vhost, [".*", ".*", ".*"]).await;
}

/// A topic exchange, a fanout exchange and a queue in `/`.
async fn topic_fanout_queue(client: &Client, topic: &str, fanout: &str, queue: &str) {
    for (x, kind) in [(topic, "topic"), (fanout, "fanout")] {
        let path = format!("/api/exchanges/%2F/{x}");
        let a = call(client, "PUT", &path, Some(json!({ "type": kind }))).await;
        assert_eq!(a.status, 201, "{}", a.body);
    }
    let a = call(
        client,
        "PUT",
        &format!("/api/queues/%2F/{queue}"),
        Some(json!({})),
    )
    .await;
    assert_eq!(a.status, 201, "{}", a.body);
}

fn names(list: &Value) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn s_mgmt_1_monitoring_reads_all_management_reads_its_vhosts() {
    let (server, admin) = start().await;
    call(&admin, "PUT", "/api/vhosts/team", None).await;
    call(&admin, "PUT", "/api/queues/team/t1", Some(json!({}))).await;
    call(&admin, "PUT", "/api/queues/%2F/root1", Some(json!({}))).await;
    put_user(&admin, "watcher", "monitoring", "team").await;
    put_user(&admin, "dev", "management", "team").await;
    let watcher = Client::new(&base(&server), "watcher", "pw");
    let dev = Client::new(&base(&server), "dev", "pw");
    assert_eq!(
        get_json(&watcher, "/api/whoami").await,
        json!({"name": "watcher", "tags": ["monitoring"]})
    );
    let mut all = names(&get_json(&watcher, "/api/queues").await);
    all.sort();
    assert_eq!(all, ["root1", "t1"]);
    assert_eq!(names(&get_json(&dev, "/api/queues").await), ["t1"]);
    assert_eq!(names(&get_json(&dev, "/api/vhosts").await), ["team"]);
    let a = call(&dev, "GET", "/api/queues/%2F", None).await;
    assert_eq!(
        (a.status, a.reason()),
        (401, "User not authorised to access virtual host".into())
    );
    let a = call(&dev, "GET", "/api/nodes", None).await;
    assert_eq!((a.status, a.reason()), (401, "Not monitor user".into()));
    assert_eq!(
        get_json(&watcher, "/api/nodes").await[0]["name"],
        "wharf@localhost"
    );
    // What they may change is tags.rs's subject; users stay the administrators'.
    for who in [&dev, &watcher] {
        let a = call(who, "GET", "/api/users", None).await;
        assert_eq!(
            (a.status, a.reason()),
            (401, "Not administrator user".into())
        );
    }
}

#[tokio::test]
async fn s_mgmt_2_lists_page_filter_sort_and_pick_columns() {
    let (_server, client) = start().await;
    for q in ["a1", "b2", "a3", "c4", "a5"] {
        call(
            &client,
            "PUT",
            &format!("/api/queues/%2F/{q}"),
            Some(json!({})),
        )
        .await;
    }
    let page = get_json(
        &client,
        "/api/queues?page=2&page_size=2&name=a&sort=name&sort_reverse=true&columns=name,vhost",
    )
    .await;
    assert_eq!(
        page,
        json!({"filtered_count": 3, "item_count": 1, "items": [{"name": "a1", "vhost": "/"}],
            "page": 2, "page_count": 2, "page_size": 2, "total_count": 5})
    );
    let plain = get_json(&client, "/api/queues?columns=name&sort=name").await;
    assert_eq!(names(&plain), ["a1", "a3", "a5", "b2", "c4"]);
    let a = call(&client, "GET", "/api/queues?page=0", None).await;
    assert_eq!(
        (a.status, a.json()),
        (
            400,
            json!({"error": "invalid_pagination_parameters",
            "reason": "Invalid pagination parameters: page number 0, page size undefined"})
        )
    );
    let a = call(&client, "GET", "/api/exchanges?page=abc", None).await;
    assert_eq!(
        (a.status, a.json()),
        (
            400,
            json!({"error": "bad_request", "reason": "Pagination parameters are invalid"})
        )
    );
    let a = call(&client, "GET", "/api/connections?page=2", None).await;
    assert_eq!(a.json()["error"], "page_out_of_range");
    let vhosts = get_json(&client, "/api/vhosts?page=1").await;
    assert_eq!(vhosts["total_count"], 1);
}

#[tokio::test]
async fn s_mgmt_4_publish_bind_exchanges_and_delete_bindings_by_props() {
    let (server, client) = start().await;
    topic_fanout_queue(&client, "up", "down", "sink").await;
    let a = call(
        &client,
        "POST",
        "/api/bindings/%2F/e/up/e/down",
        Some(json!({"routing_key": "a.#"})),
    )
    .await;
    assert_eq!(a.status, 201, "{}", a.body);
    call(
        &client,
        "POST",
        "/api/bindings/%2F/e/down/q/sink",
        Some(json!({"routing_key": ""})),
    )
    .await;
    let publish = |key: &str| {
        json!({"properties": {"delivery_mode": 2, "headers": {"h": 1}}, "routing_key": key,
            "payload": "aGk=", "payload_encoding": "base64"})
    };
    let a = call(
        &client,
        "POST",
        "/api/exchanges/%2F/up/publish",
        Some(publish("a.b")),
    )
    .await;
    assert_eq!((a.status, a.json()), (200, json!({"routed": true})));
    let a = call(
        &client,
        "POST",
        "/api/exchanges/%2F/up/publish",
        Some(publish("z")),
    )
    .await;
    assert_eq!(a.json(), json!({"routed": false}));
    let (_conn, ch) = server.channel().await;
    assert_eq!(ready_via_amqp(&ch, "sink").await, 1);
    let got = ch
        .basic_get("sink".into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.delivery.data, b"hi");
    let a = call(
        &client,
        "POST",
        "/api/exchanges/%2F/up/publish",
        Some(json!({"routing_key": "k", "payload": "x"})),
    )
    .await;
    assert_eq!(
        (a.status, a.reason()),
        (
            400,
            "[{key_missing,properties},{key_missing,payload_encoding}]".into()
        )
    );
    let a = call(
        &client,
        "POST",
        "/api/exchanges/%2F/nope/publish",
        Some(publish("k")),
    )
    .await;
    assert_eq!(
        (a.status, a.reason()),
        (
            400,
            "404 NOT_FOUND - no exchange 'nope' in vhost '/'".into()
        )
    );
    let between = get_json(&client, "/api/bindings/%2F/e/up/e/down").await;
    let props = between[0]["properties_key"].as_str().unwrap().to_owned();
    let path = format!(
        "/api/bindings/%2F/e/up/e/down/{}",
        props.replace('#', "%23")
    );
    assert_eq!(get_json(&client, &path).await["routing_key"], "a.#");
    assert_eq!(call(&client, "DELETE", &path, None).await.status, 204);
    assert_eq!(call(&client, "DELETE", &path, None).await.status, 404);
    assert_eq!(
        get_json(&client, "/api/bindings/%2F/e/up/e/down").await,
        json!([])
    );
}

#[tokio::test]
async fn s_mgmt_4_users_permissions_parameters_and_connection_close() {
    let (server, client) = start().await;
    let user = get_json(&client, "/api/users/guest").await;
    assert_eq!(user["tags"], json!(["administrator"]));
    assert_eq!(user["hashing_algorithm"], "rabbit_password_hashing_sha256");
    assert_eq!(
        call(&client, "GET", "/api/users/nope", None).await.status,
        404
    );
    assert_eq!(
        get_json(&client, "/api/permissions/%2F/guest").await,
        json!({"user": "guest", "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"})
    );
    assert_eq!(
        call(&client, "GET", "/api/permissions/%2F/nope", None)
            .await
            .status,
        404
    );
    call(
        &client,
        "PUT",
        "/api/operator-policies/%2F/cap",
        Some(json!({"pattern": ".*", "definition": {"max-length": 9}, "apply-to": "queues"})),
    )
    .await;
    let params = get_json(&client, "/api/parameters").await;
    assert_eq!(params[0]["component"], "operator_policy");
    assert_eq!(params[0]["value"]["definition"], json!({"max-length": 9}));

    let (conn, _ch) = server.channel().await;
    let mut events = conn.events_listener();
    let conns = get_json(&client, "/api/connections").await;
    let name = conns[0]["name"].as_str().unwrap().to_owned();
    let path = format!(
        "/api/connections/{}",
        name.replace(' ', "%20").replace('>', "%3E")
    );
    assert_eq!(get_json(&client, &path).await["user"], "guest");
    assert_eq!(call(&client, "DELETE", &path, None).await.status, 204);
    let err = loop {
        use futures_lite::StreamExt as _;
        if let lapin::Event::Error(e) = within(10, events.next()).await.unwrap() {
            break e;
        }
    };
    assert_eq!(support::reply_code(&err), Some(320), "{err:?}");
    assert_eq!(
        support::reply_text(&err),
        "CONNECTION_FORCED - Closed via management plugin"
    );
    assert_eq!(call(&client, "DELETE", &path, None).await.status, 404);
}

#[tokio::test]
async fn s_mgmt_5_health_checks_aliveness_and_nodes() {
    let (server, client) = start().await;
    for path in [
        "/api/health/checks/alarms",
        "/api/health/checks/local-alarms",
        "/api/health/checks/virtual-hosts",
        "/api/aliveness-test/%2F",
    ] {
        assert_eq!(
            get_json(&client, path).await,
            json!({"status": "ok"}),
            "{path}"
        );
    }
    assert_eq!(
        get_json(&client, "/api/health/checks/node-is-quorum-critical").await,
        json!({"status": "ok", "reason": "single node cluster"})
    );
    let amqp = server.handle.local_addr().port();
    assert_eq!(
        get_json(&client, &format!("/api/health/checks/port-listener/{amqp}")).await,
        json!({"status": "ok", "port": amqp})
    );
    let mgmt = server.handle.mgmt_addr().unwrap().port();
    let unused = if amqp == 1 || mgmt == 1 { 2 } else { 1 };
    let a = call(
        &client,
        "GET",
        &format!("/api/health/checks/port-listener/{unused}"),
        None,
    )
    .await;
    assert_eq!(a.status, 503);
    assert_eq!(
        a.json(),
        json!({"status": "failed", "reason": "No active listener", "missing": unused,
            "ports": [amqp, mgmt]})
    );
    assert_eq!(
        call(&client, "GET", "/api/aliveness-test/nope", None)
            .await
            .status,
        404
    );
    let node = get_json(&client, "/api/nodes/wharf@localhost").await;
    assert_eq!(node["mem_alarm"], false);
    assert_eq!(node["disk_free_alarm"], false);
    assert_eq!(node["running"], true);
    assert_eq!(
        call(&client, "GET", "/api/nodes/other", None).await.status,
        404
    );
}

#[tokio::test]
async fn s_mgmt_6_overview_rates_follow_the_broker_clock() {
    let (server, client) = start().await;
    let first = get_json(&client, "/api/overview").await;
    assert_eq!(first["rates_mode"], "basic");
    assert_eq!(first["message_stats"]["publish_details"]["rate"], 0.0);
    let (_conn, ch) = server.channel().await;
    declare(&ch, "r").await;
    for _ in 0..10 {
        publish(&ch, "r", b"x").await;
    }
    server.advance(5_000).await;
    let later = get_json(&client, "/api/overview").await;
    assert_eq!(later["message_stats"]["publish"], 10);
    assert_eq!(later["message_stats"]["publish_details"]["rate"], 2.0);
}

/// S-TPERM-1..3: set through the API, enforced on publish and bind as RabbitMQ does (its
/// texts), kept across a restart and in the definitions.
#[tokio::test]
async fn s_tperm_2_topic_permissions_restrict_publish_and_bind() {
    let (server, client) = start().await;
    call(
        &client,
        "PUT",
        "/api/exchanges/%2F/events",
        Some(json!({"type": "topic"})),
    )
    .await;
    call(
        &client,
        "PUT",
        "/api/exchanges/%2F/plain",
        Some(json!({"type": "direct"})),
    )
    .await;
    put_user(&client, "app", "", "%2F").await;
    let a = call(
        &client,
        "PUT",
        "/api/topic-permissions/%2F/app",
        Some(json!({"exchange": "events", "write": "^orders\\.", "read": "^audit\\.{username}$"})),
    )
    .await;
    assert_eq!(a.status, 201, "{}", a.body);
    let server = restart(server).await;
    let client = guest(&server);
    let listed = get_json(&client, "/api/topic-permissions/%2F/app").await;
    assert_eq!(listed[0]["write"], "^orders\\.");
    let url = format!("amqp://app:pw@{}/%2f", server.handle.local_addr());
    let conn = lapin::Connection::connect(&url, lapin::ConnectionProperties::default())
        .await
        .unwrap();
    let ch = conn.create_channel().await.unwrap();
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let send = |ch: &Channel, x: &'static str, key: &'static str| {
        let ch = ch.clone();
        async move {
            ch.basic_publish(
                x.into(),
                key.into(),
                BasicPublishOptions::default(),
                b"m",
                BasicProperties::default(),
            )
            .await?
            .await
        }
    };
    send(&ch, "events", "orders.new").await.unwrap();
    send(&ch, "plain", "anything").await.unwrap();
    let err = send(&ch, "events", "billing.new").await.unwrap_err();
    assert_eq!(support::reply_code(&err), Some(403));
    assert_eq!(
        support::reply_text(&err),
        "ACCESS_REFUSED - access to topic 'billing.new' in exchange 'events' in vhost '/' refused for user 'app'"
    );
    let ch = conn.create_channel().await.unwrap();
    ch.queue_declare(
        "mine".into(),
        QueueDeclareOptions::default(),
        LapinTable::default(),
    )
    .await
    .unwrap();
    ch.queue_bind(
        "mine".into(),
        "events".into(),
        "audit.app".into(),
        lapin::options::QueueBindOptions::default(),
        LapinTable::default(),
    )
    .await
    .unwrap();
    let err = ch
        .queue_bind(
            "mine".into(),
            "events".into(),
            "audit.other".into(),
            lapin::options::QueueBindOptions::default(),
            LapinTable::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(support::reply_code(&err), Some(403));
    assert!(support::reply_text(&err).contains("access to topic 'audit.other'"));
    let defs = get_json(&client, "/api/definitions").await;
    assert_eq!(defs["topic_permissions"][0]["exchange"], "events");
    let a = call(&client, "DELETE", "/api/topic-permissions/%2F/app", None).await;
    assert_eq!(a.status, 204);
    assert_eq!(get_json(&client, "/api/topic-permissions").await, json!([]));
}

/// S-DEFS-4: a policy's `alternate-exchange` catches what an exchange does not route, from
/// the moment the policy is set; operator policies may not carry it.
#[tokio::test]
async fn s_defs_4_alternate_exchange_policy_catches_unrouted_messages() {
    let (server, client) = start().await;
    topic_fanout_queue(&client, "events", "unrouted", "lost").await;
    call(
        &client,
        "POST",
        "/api/bindings/%2F/e/unrouted/q/lost",
        Some(json!({})),
    )
    .await;
    let publish = json!({"properties": {}, "routing_key": "nobody", "payload": "x",
        "payload_encoding": "string"});
    let a = call(
        &client,
        "POST",
        "/api/exchanges/%2F/events/publish",
        Some(publish.clone()),
    )
    .await;
    assert_eq!(a.json(), json!({"routed": false}));
    let a = call(
        &client,
        "PUT",
        "/api/policies/%2F/ae",
        Some(json!({"pattern": "^events$", "apply-to": "exchanges",
            "definition": {"alternate-exchange": "unrouted"}})),
    )
    .await;
    assert_eq!(a.status, 201, "{}", a.body);
    let a = call(
        &client,
        "POST",
        "/api/exchanges/%2F/events/publish",
        Some(publish),
    )
    .await;
    assert_eq!(a.json(), json!({"routed": true}));
    let (_conn, ch) = server.channel().await;
    assert_eq!(ready_via_amqp(&ch, "lost").await, 1);
    let a = call(
        &client,
        "PUT",
        "/api/operator-policies/%2F/ae",
        Some(json!({"pattern": ".*", "definition": {"alternate-exchange": "unrouted"}})),
    )
    .await;
    assert_eq!(a.status, 400, "{}", a.body);
}

/// S-MGMT-3: `message_bytes` counts ready and unacked bodies, as RabbitMQ's does.
#[tokio::test]
async fn s_mgmt_3_message_bytes_count_unacked_bodies_too() {
    let (server, client) = start().await;
    let (_conn, ch) = server.channel().await;
    declare(&ch, "b").await;
    publish(&ch, "b", b"abc").await;
    publish(&ch, "b", b"defgh").await;
    let held = ch
        .basic_get("b".into(), BasicGetOptions { no_ack: false })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(held.delivery.data, b"abc");
    let q = get_json(&client, "/api/queues/%2F/b").await;
    assert_eq!(q["message_bytes"], 8);
    assert_eq!(q["message_bytes_ready"], 5);
    assert_eq!(q["message_bytes_unacknowledged"], 3);
    assert_eq!(q["messages_unacknowledged"], 1);
}

/// S-MGMT-7: a connection shows its client properties and the name its client gave it, and
/// its state follows the alarms: `blocking` while an alarm is on before it publishes,
/// `blocked` once a publish is held.
#[tokio::test]
async fn s_mgmt_7_connections_show_client_properties_and_alarm_states() {
    use futures_lite::StreamExt as _;
    let (server, client) = start().await;
    let props =
        lapin::ConnectionProperties::default().with_connection_name("billing-worker".into());
    let conn = lapin::Connection::connect(&server.url(), props)
        .await
        .unwrap();
    let mut events = conn.events_listener();
    let ch = conn.create_channel().await.unwrap();
    declare(&ch, "held").await;
    let c = get_json(&client, "/api/connections").await[0].clone();
    assert_eq!(c["user_provided_name"], "billing-worker");
    assert_eq!(c["client_properties"]["connection_name"], "billing-worker");
    assert_eq!(
        c["client_properties"]["capabilities"]["connection.blocked"],
        true
    );
    assert_eq!(c["state"], "running");
    server.handle.set_blocked(Some("maintenance".into())).await;
    assert_eq!(
        get_json(&client, "/api/connections").await[0]["state"],
        "blocking"
    );
    let _held = ch
        .basic_publish(
            "".into(),
            "held".into(),
            BasicPublishOptions::default(),
            b"x",
            BasicProperties::default(),
        )
        .await
        .unwrap();
    loop {
        if let lapin::Event::ConnectionBlocked(_) = within(10, events.next()).await.unwrap() {
            break;
        }
    }
    assert_eq!(
        get_json(&client, "/api/connections").await[0]["state"],
        "blocked"
    );
    server.handle.set_blocked(None).await;
    loop {
        if let lapin::Event::ConnectionUnblocked = within(10, events.next()).await.unwrap() {
            break;
        }
    }
    assert_eq!(
        get_json(&client, "/api/connections").await[0]["state"],
        "running"
    );
}
