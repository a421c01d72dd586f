//! Policies: set, list, clear and apply; invalid ones refused with a text naming the problem.

use super::*;

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
