//! S-MGMT-1: what each of RabbitMQ's user tags may change through the API, and RabbitMQ's
//! 401 answers for the rest. A `management` (or `monitoring`, or `policymaker`) user writes
//! in the vhosts it holds a permission on, what its AMQP permissions (and topic permissions)
//! allow; `policymaker` adds the policies of those vhosts; only `administrator` manages
//! users, vhosts, permissions, operator policies and definitions. The texts are RabbitMQ's
//! (`rabbit_web_dispatch_access_control`, `rabbit_mgmt_util:direct_request` / `with_channel`).

use super::*;

/// The answer's status and RabbitMQ's `reason`.
async fn answer(client: &Client, method: &str, path: &str, body: Option<Value>) -> (u16, String) {
    let a = call(client, method, path, body).await;
    let reason = if a.status == 401 {
        assert_eq!(a.json()["error"], "not_authorised", "{}", a.body);
        a.reason()
    } else {
        String::new()
    };
    (a.status, reason)
}

const REFUSED: &str = "Access refused.";
const NOT_VHOST: &str = "User not authorised to access virtual host";
const NOT_OBJECT: &str = "User not authorised to access object";
const NOT_ADMIN: &str = "Not administrator user";

fn publish_body(key: &str) -> Value {
    json!({"routing_key": key, "properties": {}, "payload": "hi", "payload_encoding": "string"})
}

fn get_body() -> Value {
    json!({"count": 1, "ackmode": "ack_requeue_false", "encoding": "auto"})
}

/// An administrator makes vhost `team` with objects the user `dev` may not touch.
async fn team(admin: &Client) {
    assert_eq!(
        call(admin, "PUT", "/api/vhosts/team", None).await.status,
        201
    );
    for (path, body) in [
        ("/api/queues/team/other.q", json!({})),
        ("/api/exchanges/team/other.x", json!({"type": "direct"})),
    ] {
        let a = call(admin, "PUT", path, Some(body)).await;
        assert_eq!(a.status, 201, "{path}: {}", a.body);
    }
}

/// A server with vhost `team` ([`team`]) and the `management` user `dev`, who may configure
/// and read only `dev.*` there and write to `dev.*` and the default exchange.
async fn dev_in_team() -> (TestServer, Client, Client) {
    let (server, admin) = start().await;
    team(&admin).await;
    let only_dev = r"^dev\.";
    let write = r"^(dev\..*|amq\.default)$";
    put_user_with(
        &admin,
        "dev",
        "management",
        "team",
        [only_dev, write, only_dev],
    )
    .await;
    let dev = Client::new(&base(&server), "dev", "pw");
    (server, admin, dev)
}

/// `dev` declares `dev.q` and `dev.x` in `team` and binds them with the key `k`.
async fn dev_objects(dev: &Client) {
    for (path, body) in [
        ("/api/queues/team/dev.q", json!({})),
        ("/api/exchanges/team/dev.x", json!({"type": "direct"})),
    ] {
        assert_eq!(
            answer(dev, "PUT", path, Some(body)).await,
            ok(201),
            "{path}"
        );
    }
    let bind = Some(json!({"routing_key": "k"}));
    let path = "/api/bindings/team/e/dev.x/q/dev.q";
    assert_eq!(answer(dev, "POST", path, bind).await, ok(201));
}

fn ok(status: u16) -> (u16, String) {
    (status, String::new())
}

#[tokio::test]
async fn s_mgmt_1_a_management_user_writes_what_its_permissions_allow() {
    let (_server, admin, dev) = dev_in_team().await;

    // Declares and deletes need configure; another vhost is refused before anything. A
    // binding needs write on the queue and read on the exchange.
    dev_objects(&dev).await;
    for (path, body, expected) in [
        (
            "/api/queues/team/mine",
            json!({}),
            (401, REFUSED.to_owned()),
        ),
        (
            "/api/queues/%2F/dev.q",
            json!({}),
            (401, NOT_VHOST.to_owned()),
        ),
        (
            "/api/exchanges/team/mine",
            json!({"type": "direct"}),
            (401, REFUSED.to_owned()),
        ),
    ] {
        assert_eq!(
            answer(&dev, "PUT", path, Some(body)).await,
            expected,
            "{path}"
        );
    }
    let bind = json!({"routing_key": "k"});
    assert_eq!(
        answer(
            &dev,
            "POST",
            "/api/bindings/team/e/other.x/q/dev.q",
            Some(bind)
        )
        .await,
        (401, REFUSED.to_owned())
    );
    // Unbind and delete what it may configure; not what it may not.
    assert_eq!(
        answer(&dev, "DELETE", "/api/bindings/team/e/dev.x/q/dev.q/k", None).await,
        ok(204)
    );
    for (path, expected) in [
        ("/api/queues/team/other.q", (401, REFUSED.to_owned())),
        ("/api/exchanges/team/other.x", (401, REFUSED.to_owned())),
        ("/api/queues/team/dev.q", ok(204)),
        ("/api/exchanges/team/dev.x", ok(204)),
    ] {
        assert_eq!(answer(&dev, "DELETE", path, None).await, expected, "{path}");
    }
    // The administrator's objects are still there.
    let queues = get_json(&admin, "/api/queues/team").await;
    assert_eq!(queues.as_array().unwrap().len(), 1, "{queues}");
}

#[tokio::test]
async fn s_mgmt_1_a_management_user_publishes_gets_and_purges_as_its_permissions_allow() {
    let (_server, _admin, dev) = dev_in_team().await;
    dev_objects(&dev).await;
    // Publish, get and purge answer with the channel's refusal, as RabbitMQ's do.
    let a = call(
        &dev,
        "POST",
        "/api/exchanges/team/dev.x/publish",
        Some(publish_body("k")),
    )
    .await;
    assert_eq!(
        (a.status, a.json()),
        (200, json!({"routed": true})),
        "{}",
        a.body
    );
    assert_eq!(
        answer(
            &dev,
            "POST",
            "/api/exchanges/team/other.x/publish",
            Some(publish_body("k"))
        )
        .await,
        (
            401,
            "ACCESS_REFUSED - write access to exchange 'other.x' in vhost 'team' refused for \
             user 'dev'"
                .to_owned()
        )
    );
    let a = call(&dev, "POST", "/api/queues/team/dev.q/get", Some(get_body())).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.json()[0]["payload"], "hi");
    let read_refused = (
        401,
        "ACCESS_REFUSED - read access to queue 'other.q' in vhost 'team' refused for user 'dev'"
            .to_owned(),
    );
    assert_eq!(
        answer(
            &dev,
            "POST",
            "/api/queues/team/other.q/get",
            Some(get_body())
        )
        .await,
        read_refused
    );
    assert_eq!(
        answer(&dev, "DELETE", "/api/queues/team/dev.q/contents", None).await,
        ok(204)
    );
    assert_eq!(
        answer(&dev, "DELETE", "/api/queues/team/other.q/contents", None).await,
        read_refused
    );
}

#[tokio::test]
async fn s_mgmt_1_administrators_alone_manage_users_vhosts_permissions_and_definitions() {
    let (server, admin) = start().await;
    team(&admin).await;
    let all = [".*", ".*", ".*"];
    put_user_with(&admin, "dev", "management", "team", all).await;
    put_user_with(&admin, "pm", "policymaker", "team", all).await;
    put_user_with(&admin, "watcher", "monitoring", "team", all).await;
    let policy = json!({"pattern": "^x", "definition": {"max-length": 10}});
    for name in ["dev", "pm", "watcher"] {
        let c = Client::new(&base(&server), name, "pw");
        for (method, path, body) in [
            ("GET", "/api/users", None),
            (
                "PUT",
                "/api/users/eve",
                Some(json!({"password": "x", "tags": ""})),
            ),
            ("DELETE", "/api/users/guest", None),
            ("PUT", "/api/vhosts/new", None),
            ("DELETE", "/api/vhosts/team", None),
            (
                "PUT",
                "/api/permissions/team/eve",
                Some(json!({"configure": ".*", "write": ".*", "read": ".*"})),
            ),
            ("GET", "/api/definitions", None),
            ("POST", "/api/definitions", Some(json!({}))),
            ("GET", "/api/definitions/team", None),
            (
                "PUT",
                "/api/operator-policies/team/cap",
                Some(policy.clone()),
            ),
        ] {
            assert_eq!(
                answer(&c, method, path, body).await,
                (401, NOT_ADMIN.to_owned()),
                "{name}: {method} {path}"
            );
        }
    }
    // Nothing changed.
    assert_eq!(
        call(&admin, "GET", "/api/users/eve", None).await.status,
        404
    );
    assert_eq!(
        call(&admin, "GET", "/api/vhosts/team", None).await.status,
        200
    );
}

#[tokio::test]
async fn s_mgmt_1_a_policymaker_manages_the_policies_of_its_vhosts() {
    let (server, admin) = start().await;
    team(&admin).await;
    let all = [".*", ".*", ".*"];
    put_user_with(&admin, "pm", "policymaker", "team", all).await;
    put_user_with(&admin, "dev", "management", "team", all).await;
    let pm = Client::new(&base(&server), "pm", "pw");
    let dev = Client::new(&base(&server), "dev", "pw");
    let policy = json!({"pattern": "^x", "definition": {"max-length": 10}, "apply-to": "queues"});
    assert_eq!(
        answer(&pm, "PUT", "/api/policies/team/cap", Some(policy.clone())).await,
        (201, String::new())
    );
    assert_eq!(
        get_json(&pm, "/api/policies/team/cap").await["definition"],
        json!({"max-length": 10})
    );
    // The policy applies: a queue it declares (its permissions allow) gets it.
    assert_eq!(
        answer(&pm, "PUT", "/api/queues/team/x1", Some(json!({}))).await,
        (201, String::new())
    );
    assert_eq!(get_json(&pm, "/api/queues/team/x1").await["policy"], "cap");
    assert_eq!(call(&pm, "GET", "/api/parameters", None).await.status, 200);
    // Not in a vhost it has no permission on; a management user not at all.
    assert_eq!(
        answer(&pm, "PUT", "/api/policies/%2F/cap", Some(policy.clone())).await,
        (401, NOT_OBJECT.to_owned())
    );
    for (method, path, body) in [
        ("PUT", "/api/policies/team/cap2", Some(policy.clone())),
        ("GET", "/api/policies/team/cap", None),
        ("DELETE", "/api/policies/team/cap", None),
        ("GET", "/api/parameters", None),
    ] {
        assert_eq!(
            answer(&dev, method, path, body).await,
            (401, NOT_OBJECT.to_owned()),
            "{method} {path}"
        );
    }
    // A management user still lists the policies of its vhosts, as RabbitMQ lets it.
    assert_eq!(get_json(&dev, "/api/policies/team").await[0]["name"], "cap");
    assert_eq!(
        answer(&pm, "DELETE", "/api/policies/team/cap", None).await,
        (204, String::new())
    );
    assert_eq!(
        call(&admin, "GET", "/api/policies/team/cap", None)
            .await
            .status,
        404
    );
}

#[tokio::test]
async fn s_mgmt_1_topic_permissions_hold_for_api_publishes() {
    let (server, admin) = start().await;
    team(&admin).await;
    put_user_with(&admin, "dev", "management", "team", [".*", ".*", ".*"]).await;
    let a = call(
        &admin,
        "PUT",
        "/api/topic-permissions/team/dev",
        Some(json!({"exchange": "amq.topic", "write": r"^ok\.", "read": r"^ok\."})),
    )
    .await;
    assert_eq!(a.status, 201, "{}", a.body);
    let dev = Client::new(&base(&server), "dev", "pw");
    let path = "/api/exchanges/team/amq.topic/publish";
    assert_eq!(
        answer(&dev, "POST", path, Some(publish_body("ok.1"))).await,
        (200, String::new())
    );
    assert_eq!(
        answer(&dev, "POST", path, Some(publish_body("no"))).await,
        (
            401,
            "ACCESS_REFUSED - access to topic 'no' in exchange 'amq.topic' in vhost 'team' \
             refused for user 'dev'"
                .to_owned()
        )
    );
    // Binding from it reads the topic: refused as a direct method is.
    let bind = Some(json!({"routing_key": "no"}));
    assert_eq!(
        answer(
            &dev,
            "POST",
            "/api/bindings/team/e/amq.topic/q/other.q",
            bind
        )
        .await,
        (401, REFUSED.to_owned())
    );
    // The administrator is not held by another user's topic permission.
    assert_eq!(
        answer(&admin, "POST", path, Some(publish_body("no"))).await,
        (200, String::new())
    );
}

#[tokio::test]
async fn s_mgmt_1_users_close_their_own_connections_administrators_any() {
    let (server, admin) = start().await;
    put_user_with(&admin, "dev", "management", "%2F", [".*", ".*", ".*"]).await;
    let dev = Client::new(&base(&server), "dev", "pw");
    let addr = server.handle.local_addr();
    let dev_conn = lapin::Connection::connect(
        &format!("amqp://dev:pw@{addr}/%2f"),
        lapin::ConnectionProperties::default(),
    )
    .await
    .unwrap();
    let guest_conn = server.connect().await;
    let path_of = |user: &str, conns: &Value| {
        let name = conns
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["user"] == user)
            .unwrap()["name"]
            .as_str()
            .unwrap()
            .to_owned();
        format!(
            "/api/connections/{}",
            name.replace(' ', "%20").replace('>', "%3E")
        )
    };
    let conns = get_json(&admin, "/api/connections").await;
    let (mine, theirs) = (path_of("dev", &conns), path_of("guest", &conns));
    assert_eq!(
        answer(&dev, "DELETE", &theirs, None).await,
        (401, NOT_OBJECT.to_owned())
    );
    assert!(guest_conn.status().connected());
    assert_eq!(
        answer(&dev, "DELETE", &mine, None).await,
        (204, String::new())
    );
    assert_eq!(
        answer(&admin, "DELETE", &theirs, None).await,
        (204, String::new())
    );
    drop(dev_conn);
}
