//! The management HTTP API against an in-process server (AMQP and mgmt on 127.0.0.1:0):
//! RabbitMQ's paths and JSON shapes, the 401/403/404/400 answers, and the effects of purge,
//! delete and get seen through AMQP (lapin). The HTTP client is `wharf_ctl::client` (ureq),
//! the one `wharfctl` uses.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use crate::support;

use lapin::options::{
    BasicConsumeOptions, BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions,
    QueueDeclareOptions,
};
use lapin::types::FieldTable as LapinTable;
use lapin::{BasicProperties, Channel};
use serde_json::{Value, json};
use support::{TestServer, within};
use wharf_ctl::{Answer, Client};
use wharf_server::{Server, ServerConfig, User, Users};

async fn start() -> (TestServer, Client) {
    let server = TestServer::start_with(|c| c.mgmt_bind = Some("127.0.0.1:0".to_owned())).await;
    let client = guest(&server);
    (server, client)
}

/// A clean restart on the same directory and clock, management API included.
async fn restart(server: TestServer) -> TestServer {
    let TestServer { handle, clock, dir } = server;
    handle.shutdown().await.unwrap();
    let mut config = ServerConfig::new("127.0.0.1:0", dir.path());
    config.clock = std::sync::Arc::new(clock.clone());
    config.mgmt_bind = Some("127.0.0.1:0".to_owned());
    let handle = Server::start(config).await.unwrap();
    TestServer { handle, clock, dir }
}

fn base(server: &TestServer) -> String {
    format!("http://{}", server.handle.mgmt_addr().unwrap())
}

fn guest(server: &TestServer) -> Client {
    Client::new(&base(server), "guest", "guest")
}

/// One request, off the async runtime (ureq blocks).
async fn call(client: &Client, method: &str, path: &str, body: Option<Value>) -> Answer {
    let (client, method, path) = (client.clone(), method.to_owned(), path.to_owned());
    within(
        10,
        tokio::task::spawn_blocking(move || client.request(&method, &path, body.as_ref())),
    )
    .await
    .unwrap()
    .unwrap()
}

async fn get_json(client: &Client, path: &str) -> Value {
    let a = call(client, "GET", path, None).await;
    assert_eq!(a.status, 200, "GET {path}: {}", a.body);
    a.json()
}

async fn publish(ch: &Channel, queue: &str, body: &[u8]) {
    ch.basic_publish(
        "".into(),
        queue.into(),
        BasicPublishOptions::default(),
        body,
        BasicProperties::default().with_delivery_mode(2),
    )
    .await
    .unwrap()
    .await
    .unwrap();
}

async fn declare(ch: &Channel, queue: &str) {
    ch.queue_declare(
        queue.into(),
        QueueDeclareOptions {
            durable: true,
            ..QueueDeclareOptions::default()
        },
        LapinTable::default(),
    )
    .await
    .unwrap();
}

async fn ready_via_amqp(ch: &Channel, queue: &str) -> u32 {
    ch.queue_declare(
        queue.into(),
        QueueDeclareOptions {
            passive: true,
            ..QueueDeclareOptions::default()
        },
        LapinTable::default(),
    )
    .await
    .unwrap()
    .message_count()
}

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
    assert_eq!(a.json()["error"], "not_authorized");
    let wrong = Client::new(&base(&server), "guest", "nope");
    assert_eq!(call(&wrong, "GET", "/api/overview", None).await.status, 401);
    let unknown = Client::new(&base(&server), "who", "guest");
    assert_eq!(
        call(&unknown, "GET", "/api/overview", None).await.status,
        401
    );
}

#[tokio::test]
async fn a_user_who_is_not_an_administrator_gets_403() {
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
        assert_eq!(a.status, 403, "{method} {path}: {}", a.body);
    }
    // Any user may ask whether the node is healthy.
    assert_eq!(
        call(&app, "GET", "/api/healthchecks/node", None)
            .await
            .status,
        200
    );
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

#[tokio::test]
async fn queue_put_get_list_delete_and_the_answer_is_durable() {
    let (server, client) = start().await;
    let a = call(
        &client,
        "PUT",
        "/api/queues/%2F/orders",
        Some(json!({"durable": true, "arguments": {"x-message-ttl": 60000}})),
    )
    .await;
    assert_eq!(a.status, 201, "{}", a.body);
    // Declaring it again is an update.
    let a = call(
        &client,
        "PUT",
        "/api/queues/%2F/orders",
        Some(json!({"durable": true, "arguments": {"x-message-ttl": 60000}})),
    )
    .await;
    assert_eq!(a.status, 204, "{}", a.body);
    // An inequivalent redeclare is the broker's 406, as a 400 with its text.
    let a = call(
        &client,
        "PUT",
        "/api/queues/%2F/orders",
        Some(json!({"durable": true, "arguments": {"x-message-ttl": 1}})),
    )
    .await;
    assert_eq!(a.status, 400);
    assert!(a.reason().contains("x-message-ttl"), "{}", a.reason());
    let a = call(
        &client,
        "PUT",
        "/api/queues/%2F/bad",
        Some(json!({"arguments": {"x-expires": 0}})),
    )
    .await;
    assert_eq!(a.status, 400);
    assert!(a.reason().contains("x-expires"), "{}", a.reason());

    let q = get_json(&client, "/api/queues/%2F/orders").await;
    for key in [
        "name",
        "vhost",
        "durable",
        "auto_delete",
        "exclusive",
        "arguments",
        "node",
        "state",
        "messages",
        "messages_ready",
        "messages_unacknowledged",
        "message_bytes",
        "consumers",
        "policy",
        "effective_policy_definition",
    ] {
        assert!(q.get(key).is_some(), "queue lacks {key}: {q}");
    }
    assert_eq!(q["name"], "orders");
    assert_eq!(q["vhost"], "/");
    assert_eq!(q["arguments"], json!({"x-message-ttl": 60000}));
    assert_eq!(q["effective_message_ttl"], 60000);
    let all = get_json(&client, "/api/queues").await;
    assert_eq!(all.as_array().unwrap().len(), 1);
    let in_vhost = get_json(&client, "/api/queues/%2F").await;
    assert_eq!(in_vhost, all);

    // The 201 promised durability: a restart keeps the queue.
    let server = restart(server).await;
    let client = guest(&server);
    let q = get_json(&client, "/api/queues/%2F/orders").await;
    assert_eq!(q["durable"], true);

    let a = call(&client, "DELETE", "/api/queues/%2F/orders", None).await;
    assert_eq!(a.status, 204);
    assert_eq!(
        call(&client, "GET", "/api/queues/%2F/orders", None)
            .await
            .status,
        404
    );
}

#[tokio::test]
async fn purge_and_conditional_delete_are_seen_through_amqp() {
    let (server, client) = start().await;
    let (_conn, ch) = server.channel().await;
    declare(&ch, "work").await;
    for i in 0..3u8 {
        publish(&ch, "work", &[i]).await;
    }
    assert_eq!(ready_via_amqp(&ch, "work").await, 3);
    let a = call(
        &client,
        "DELETE",
        "/api/queues/%2F/work?if-empty=true",
        None,
    )
    .await;
    assert_eq!(a.status, 400, "{}", a.body);
    assert_eq!(ready_via_amqp(&ch, "work").await, 3);

    let a = call(&client, "DELETE", "/api/queues/%2F/work/contents", None).await;
    assert_eq!(a.status, 204, "{}", a.body);
    assert_eq!(ready_via_amqp(&ch, "work").await, 0);

    let _consumer = ch
        .basic_consume(
            "work".into(),
            "c1".into(),
            BasicConsumeOptions::default(),
            LapinTable::default(),
        )
        .await
        .unwrap();
    let a = call(
        &client,
        "DELETE",
        "/api/queues/%2F/work?if-unused=true",
        None,
    )
    .await;
    assert_eq!(a.status, 400, "{}", a.body);
    let a = call(
        &client,
        "DELETE",
        "/api/queues/%2F/work?if-empty=true",
        None,
    )
    .await;
    assert_eq!(a.status, 204, "{}", a.body);
    let (_c2, ch2) = server.channel().await;
    let err = ch2
        .queue_declare(
            "work".into(),
            QueueDeclareOptions {
                passive: true,
                ..QueueDeclareOptions::default()
            },
            LapinTable::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(support::reply_code(&err), Some(404));
}

#[tokio::test]
async fn get_with_requeue_peeks_and_without_takes() {
    let (server, client) = start().await;
    let (_conn, ch) = server.channel().await;
    declare(&ch, "peek").await;
    publish(&ch, "peek", b"hello").await;
    publish(&ch, "peek", &[0xff, 0x00, 0x01]).await;
    publish(&ch, "peek", b"third").await;

    let peek =
        json!({"count": 2, "ackmode": "ack_requeue_true", "encoding": "auto", "truncate": 50000});
    let a = call(&client, "POST", "/api/queues/%2F/peek/get", Some(peek)).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let msgs = a.json();
    assert_eq!(msgs.as_array().unwrap().len(), 2);
    assert_eq!(msgs[0]["payload"], "hello");
    assert_eq!(msgs[0]["payload_encoding"], "string");
    assert_eq!(msgs[0]["payload_bytes"], 5);
    assert_eq!(msgs[0]["routing_key"], "peek");
    assert_eq!(msgs[0]["exchange"], "");
    assert_eq!(msgs[0]["properties"]["delivery_mode"], 2);
    assert_eq!(msgs[1]["payload"], "/wAB");
    assert_eq!(msgs[1]["payload_encoding"], "base64");
    assert_eq!(
        ready_via_amqp(&ch, "peek").await,
        3,
        "peek changed the queue"
    );

    let truncated =
        json!({"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto", "truncate": 2});
    let a = call(&client, "POST", "/api/queues/%2F/peek/get", Some(truncated)).await;
    assert_eq!(a.json()[0]["payload"], "he");
    assert_eq!(a.json()[0]["payload_bytes"], 5);

    let take = json!({"count": 1, "ackmode": "ack_requeue_false", "encoding": "base64"});
    let a = call(&client, "POST", "/api/queues/%2F/peek/get", Some(take)).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.json()[0]["payload"], "aGVsbG8=");
    assert_eq!(a.json()[0]["message_count"], 2);
    assert_eq!(ready_via_amqp(&ch, "peek").await, 2);
    // The next message an AMQP client gets is the second one.
    let got = ch
        .basic_get("peek".into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.delivery.data, vec![0xff, 0x00, 0x01]);

    let bad = json!({"count": 1, "ackmode": "sometimes"});
    let a = call(&client, "POST", "/api/queues/%2F/peek/get", Some(bad)).await;
    assert_eq!(a.status, 400);
    let nope = json!({"count": 1, "ackmode": "ack_requeue_false"});
    let a = call(&client, "POST", "/api/queues/%2F/nope/get", Some(nope)).await;
    assert_eq!(a.status, 404);
}

#[tokio::test]
async fn policies_set_list_clear_and_apply() {
    let (server, client) = start().await;
    let (_conn, ch) = server.channel().await;
    declare(&ch, "ttl.q").await;
    let body = json!({"pattern": "^ttl\\.", "definition": {"message-ttl": 1000}, "priority": 1, "apply-to": "queues"});
    let a = call(&client, "PUT", "/api/policies/%2F/TTL", Some(body.clone())).await;
    assert_eq!(a.status, 201, "{}", a.body);
    let a = call(&client, "PUT", "/api/policies/%2F/TTL", Some(body)).await;
    assert_eq!(a.status, 204, "{}", a.body);
    let p = get_json(&client, "/api/policies/%2F/TTL").await;
    assert_eq!(
        p,
        json!({"vhost": "/", "name": "TTL", "pattern": "^ttl\\.", "apply-to": "queues",
               "definition": {"message-ttl": 1000}, "priority": 1})
    );
    assert_eq!(get_json(&client, "/api/policies").await, json!([p.clone()]));
    assert_eq!(get_json(&client, "/api/policies/%2F").await, json!([p]));
    let q = get_json(&client, "/api/queues/%2F/ttl.q").await;
    assert_eq!(q["policy"], "TTL");
    assert_eq!(
        q["effective_policy_definition"],
        json!({"message-ttl": 1000})
    );

    // Operator policies are a separate list and may only lower numeric limits.
    let op = json!({"pattern": ".*", "definition": {"message-ttl": 500}, "apply-to": "queues"});
    let a = call(&client, "PUT", "/api/operator-policies/%2F/cap", Some(op)).await;
    assert_eq!(a.status, 201, "{}", a.body);
    let ops = get_json(&client, "/api/operator-policies").await;
    assert_eq!(ops.as_array().unwrap().len(), 1);
    assert_eq!(ops[0]["name"], "cap");
    assert_eq!(
        get_json(&client, "/api/policies")
            .await
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let q = get_json(&client, "/api/queues/%2F/ttl.q").await;
    assert_eq!(q["operator_policy"], "cap");
    assert_eq!(q["effective_message_ttl"], 500);
    let bad_op = json!({"pattern": ".*", "definition": {"dead-letter-exchange": "x"}});
    let a = call(
        &client,
        "PUT",
        "/api/operator-policies/%2F/dlx",
        Some(bad_op),
    )
    .await;
    assert_eq!(a.status, 400);
    assert!(
        a.reason().contains("dead-letter-exchange"),
        "{}",
        a.reason()
    );

    assert_eq!(
        call(&client, "DELETE", "/api/operator-policies/%2F/cap", None)
            .await
            .status,
        204
    );
    assert_eq!(
        call(&client, "DELETE", "/api/policies/%2F/TTL", None)
            .await
            .status,
        204
    );
    assert_eq!(get_json(&client, "/api/policies").await, json!([]));
    let q = get_json(&client, "/api/queues/%2F/ttl.q").await;
    assert_eq!(q["policy"], Value::Null);
}

#[tokio::test]
async fn invalid_policies_are_refused_with_a_text_naming_the_problem() {
    let (_server, client) = start().await;
    let cases = [
        (
            json!({"pattern": ".*", "definition": {"message-tll": 1}}),
            "message-tll",
        ),
        (
            json!({"pattern": ".*", "definition": {"message-ttl": "soon"}}),
            "message-ttl",
        ),
        (
            json!({"pattern": ".*", "definition": {"expires": 0}}),
            "expires",
        ),
        (
            json!({"pattern": "(", "definition": {"message-ttl": 1}}),
            "regular expression",
        ),
        (
            json!({"pattern": ".*", "definition": {"message-ttl": 1}, "apply-to": "topics"}),
            "apply-to",
        ),
        (json!({"pattern": ".*", "definition": {}}), "empty"),
        (json!({"definition": {"message-ttl": 1}}), "pattern"),
        (
            json!({"pattern": ".*", "definition": {"message-ttl": 1}, "priority": "high"}),
            "priority",
        ),
    ];
    for (body, needle) in cases {
        let a = call(&client, "PUT", "/api/policies/%2F/p", Some(body.clone())).await;
        assert_eq!(a.status, 400, "{body}: {}", a.body);
        assert_eq!(a.json()["error"], "bad_request");
        assert!(a.reason().contains(needle), "{body}: {}", a.reason());
    }
    let a = call(&client, "PUT", "/api/policies/%2F/p", None).await;
    assert_eq!(a.status, 400);
    assert_eq!(get_json(&client, "/api/policies").await, json!([]));
    let a = call(
        &client,
        "PUT",
        "/api/policies/nope/p",
        Some(json!({"pattern": ".*", "definition": {"message-ttl": 1}})),
    )
    .await;
    assert_eq!(a.status, 404);
}

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

#[tokio::test]
async fn connections_channels_and_consumers_are_listed() {
    let (server, client) = start().await;
    let (_conn, ch) = server.channel().await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    declare(&ch, "jobs").await;
    ch.basic_qos(10, lapin::options::BasicQosOptions::default())
        .await
        .unwrap();
    let _consumer = ch
        .basic_consume(
            "jobs".into(),
            "worker-1".into(),
            BasicConsumeOptions::default(),
            LapinTable::default(),
        )
        .await
        .unwrap();
    let conns = get_json(&client, "/api/connections").await;
    assert_eq!(conns.as_array().unwrap().len(), 1);
    let c = &conns[0];
    assert_eq!(c["user"], "guest");
    assert_eq!(c["vhost"], "/");
    assert_eq!(c["peer_host"], "127.0.0.1");
    assert_eq!(c["channels"], 1);
    assert_eq!(c["protocol"], "AMQP 0-9-1");
    let chans = get_json(&client, "/api/channels").await;
    assert_eq!(chans[0]["number"], 1);
    assert_eq!(chans[0]["confirm"], true);
    assert_eq!(chans[0]["consumer_count"], 1);
    assert_eq!(chans[0]["connection_details"]["name"], c["name"]);
    let consumers = get_json(&client, "/api/consumers").await;
    assert_eq!(consumers.as_array().unwrap().len(), 1);
    let k = &consumers[0];
    assert_eq!(k["consumer_tag"], "worker-1");
    assert_eq!(k["queue"], json!({"name": "jobs", "vhost": "/"}));
    assert_eq!(k["ack_required"], true);
    assert_eq!(k["prefetch_count"], 10);
    assert_eq!(k["channel_details"]["connection_name"], c["name"]);
}

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

#[tokio::test]
async fn metrics_need_no_auth_and_follow_traffic() {
    let (server, _) = start().await;
    let (_conn, ch) = server.channel().await;
    // Confirms come after the fsync, so every record below is counted before the scrape.
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    declare(&ch, "m").await;
    for _ in 0..3 {
        publish(&ch, "m", b"abcd").await;
    }
    let got = ch
        .basic_get("m".into(), BasicGetOptions { no_ack: false })
        .await
        .unwrap()
        .unwrap();
    got.ack(lapin::options::BasicAckOptions::default())
        .await
        .unwrap();
    let _held = ch
        .basic_get("m".into(), BasicGetOptions { no_ack: false })
        .await
        .unwrap()
        .unwrap();
    let anon = Client::anonymous(&base(&server));
    let a = call(&anon, "GET", "/metrics", None).await;
    assert_eq!(a.status, 200);
    let text = a.body;
    // Three persistent messages into a durable queue: at least one fsync, each counted in
    // both histograms, and the +Inf bucket holds them all.
    let count_of = |name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in\n{text}"))
    };
    let syncs = count_of("wharf_wal_fsync_seconds_count");
    assert!(syncs >= 1, "{text}");
    assert_eq!(count_of("wharf_wal_records_per_fsync_count"), syncs);
    assert_eq!(
        count_of("wharf_wal_fsync_seconds_bucket{le=\"+Inf\"}"),
        syncs
    );
    assert!(count_of("wharf_wal_records_per_fsync_sum") >= 3, "{text}");
    for line in [
        "wharf_queue_messages_ready{vhost=\"/\",queue=\"m\"} 1",
        "wharf_queue_messages_unacked{vhost=\"/\",queue=\"m\"} 1",
        "wharf_queue_messages_ready_bytes{vhost=\"/\",queue=\"m\"} 4",
        "wharf_messages_published_total 3",
        "wharf_messages_delivered_total 2",
        "wharf_messages_acked_total 1",
        "wharf_messages_expired_total 0",
        "wharf_connections 1",
        "# TYPE wharf_messages_published_total counter",
        "# TYPE wharf_recovery_seconds gauge",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
}

#[tokio::test]
async fn metrics_count_expired_and_dead_lettered_messages() {
    let (server, _) = start().await;
    let (_conn, ch) = server.channel().await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    declare(&ch, "dead").await;
    let mut dlx = LapinTable::default();
    dlx.insert(
        "x-message-ttl".into(),
        lapin::types::AMQPValue::LongInt(1000),
    );
    dlx.insert(
        "x-dead-letter-exchange".into(),
        lapin::types::AMQPValue::LongString("".into()),
    );
    dlx.insert(
        "x-dead-letter-routing-key".into(),
        lapin::types::AMQPValue::LongString("dead".into()),
    );
    let mut plain = LapinTable::default();
    plain.insert(
        "x-message-ttl".into(),
        lapin::types::AMQPValue::LongInt(1000),
    );
    for (name, args) in [("with-dlx", dlx), ("plain", plain)] {
        ch.queue_declare(
            name.into(),
            QueueDeclareOptions {
                durable: true,
                ..QueueDeclareOptions::default()
            },
            args,
        )
        .await
        .unwrap();
        publish(&ch, name, b"m").await;
    }
    // S-TTL: both expire at 1000 ms on the manual clock; one of them is dead-lettered.
    server.advance(1001).await;
    let anon = Client::anonymous(&base(&server));
    let text = call(&anon, "GET", "/metrics", None).await.body;
    for line in [
        "wharf_messages_expired_total 2",
        "wharf_messages_dead_lettered_total 1",
        "wharf_queue_messages_ready{vhost=\"/\",queue=\"dead\"} 1",
        "wharf_queue_messages_ready{vhost=\"/\",queue=\"plain\"} 0",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
}

/// The value of an unlabelled metric line `name value`.
fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
}

#[tokio::test]
async fn metrics_count_acked_messages_not_ack_methods() {
    let (server, client) = start().await;
    let (_conn, ch) = server.channel().await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    declare(&ch, "acks").await;
    for _ in 0..4 {
        publish(&ch, "acks", b"x").await;
    }
    let mut last = None;
    for _ in 0..3 {
        last = ch
            .basic_get("acks".into(), BasicGetOptions { no_ack: false })
            .await
            .unwrap();
    }
    // One basic.ack with multiple=true settles three messages.
    last.unwrap()
        .ack(lapin::options::BasicAckOptions { multiple: true })
        .await
        .unwrap();
    let fourth = ch
        .basic_get("acks".into(), BasicGetOptions { no_ack: false })
        .await
        .unwrap()
        .unwrap();
    fourth
        .ack(lapin::options::BasicAckOptions::default())
        .await
        .unwrap();
    // A synchronous method after the acks on the same channel: the broker task has handled
    // them before it answers this.
    let empty = ch
        .basic_get("acks".into(), BasicGetOptions { no_ack: false })
        .await
        .unwrap();
    assert!(empty.is_none());
    let text = call(&Client::anonymous(&base(&server)), "GET", "/metrics", None)
        .await
        .body;
    assert_eq!(metric(&text, "wharf_messages_acked_total"), 4, "{text}");
    assert_eq!(metric(&text, "wharf_messages_delivered_total"), 4);
    assert!(
        text.lines()
            .any(|l| l == "wharf_queue_messages_unacked{vhost=\"/\",queue=\"acks\"} 0"),
        "{text}"
    );
    // `/api/overview`'s ack count is the same counter.
    let overview = get_json(&client, "/api/overview").await;
    assert_eq!(overview["message_stats"]["ack"], 4, "{overview}");
    // No made-up `messages_unconfirmed` on channels (confirms are not counted per channel).
    let channels = get_json(&client, "/api/channels").await;
    let open = channels.as_array().unwrap();
    assert!(!open.is_empty());
    for c in open {
        assert!(c.get("messages_unconfirmed").is_none(), "{c}");
        assert_eq!(c["confirm"], true);
    }
}

/// A probe that reports fixed figures.
#[derive(Debug)]
struct FixedProbe;

impl wharf_server::ResourceProbe for FixedProbe {
    fn disk_free_bytes(&self) -> std::io::Result<u64> {
        Ok(123_456_789)
    }
    fn memory_used_bytes(&self) -> std::io::Result<u64> {
        Ok(4_567_000)
    }
}

#[tokio::test]
async fn metrics_report_free_disk_and_memory_as_the_alarm_monitor_measured_them() {
    let server = TestServer::start_with(|c| {
        c.mgmt_bind = Some("127.0.0.1:0".to_owned());
        c.resource_probe = Some(std::sync::Arc::new(FixedProbe));
        c.memory_high_watermark = wharf_server::MemoryLimit::Bytes(1 << 30);
    })
    .await;
    server.handle.check_resources().await;
    let text = call(&Client::anonymous(&base(&server)), "GET", "/metrics", None)
        .await
        .body;
    assert_eq!(
        metric(&text, "wharf_disk_free_bytes"),
        123_456_789,
        "{text}"
    );
    assert_eq!(metric(&text, "wharf_memory_used_bytes"), 4_567_000);
    assert_eq!(metric(&text, "wharf_memory_limit_bytes"), 1 << 30);
    for line in [
        "# TYPE wharf_disk_free_bytes gauge",
        "# TYPE wharf_memory_used_bytes gauge",
        "# TYPE wharf_recovery_seconds gauge",
        "# TYPE wharf_wal_fsync_seconds histogram",
        "# TYPE wharf_wal_records_per_fsync histogram",
        "# TYPE wharf_messages_expired_total counter",
        "# TYPE wharf_messages_dead_lettered_total counter",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
}
