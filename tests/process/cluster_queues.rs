//! Quorum queues of `wharf` processes in a cluster (issue #17): the binary hands its node's
//! queue group (`wharf_cluster::QUEUE_GROUP`) to its server, so a quorum queue declared on the
//! group's leader is replicated to the other nodes. Three processes behind the fault-injecting
//! proxy (tests/support/cluster.rs); what a node says of the group comes from `wharfctl
//! cluster_status`, what a client sees from lapin.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::time::Duration;

use futures_lite::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicGetOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};

use crate::support::cluster::{Cluster, connect, eventually, now};
use crate::support::{reply_code, reply_text, within};

/// The group carrying the quorum queues.
const QUEUES: u64 = wharf_cluster::QUEUE_GROUP;
/// How long a test waits for a group to form or a node to catch up.
const WAIT: Duration = Duration::from_secs(20);

fn quorum() -> FieldTable {
    let mut args = FieldTable::default();
    args.insert(
        "x-queue-type".into(),
        AMQPValue::LongString("quorum".into()),
    );
    args
}

fn durable() -> QueueDeclareOptions {
    QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    }
}

/// The AMQP URL of the default user and vhost at `addr`.
fn url_of(addr: &str) -> String {
    format!("amqp://guest:guest@{addr}/%2f")
}

/// The leader's AMQP address named in a follower's refusal (S-CLU-13): `... is led by node 2
/// at 127.0.0.1:5673, not this node; ...`.
fn named_leader(text: &str) -> Option<String> {
    let rest = text.split(" at ").nth(1)?;
    Some(rest.split(',').next()?.to_owned())
}

/// Finds the leader as a client does, starting at `start`: declares the quorum queue `queue`
/// there; a follower refuses with 405 naming the leader's address (S-CLU-11, S-CLU-13),
/// which is tried next; a node not serving yet (an election, a take-over under way) is asked
/// again. Returns the leader's URL and a confirm-mode channel on it with the queue declared.
async fn find_leader(start: &str, queue: &str) -> (String, Connection, Channel) {
    let began = now();
    let mut url = start.to_owned();
    let mut last = String::new();
    loop {
        assert!(
            began.elapsed() < WAIT,
            "no leader found from {start} within {WAIT:?}; last: {last}"
        );
        let Ok(Ok(conn)) = tokio::time::timeout(
            Duration::from_secs(5),
            Connection::connect(&url, ConnectionProperties::default()),
        )
        .await
        else {
            // A leader named before it died: start over.
            last = format!("{url} did not answer");
            url = start.to_owned();
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let ch = within(20, conn.create_channel()).await.unwrap();
        match within(20, ch.queue_declare(queue.into(), durable(), quorum())).await {
            Ok(_) => {
                within(20, ch.confirm_select(ConfirmSelectOptions::default()))
                    .await
                    .unwrap();
                return (url, conn, ch);
            }
            Err(e) if reply_code(&e) == Some(405) => {
                last = reply_text(&e);
                if let Some(addr) = named_leader(&last) {
                    url = url_of(&addr);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("declaring {queue} at {url}: {e}"),
        }
    }
}

/// Publishes `body` persistently to `queue` and waits for its confirm (an ack).
async fn publish_confirmed(ch: &Channel, queue: &str, body: &[u8]) {
    let confirm = within(
        20,
        ch.basic_publish(
            "".into(),
            queue.into(),
            BasicPublishOptions::default(),
            body,
            BasicProperties::default().with_delivery_mode(2),
        ),
    )
    .await
    .unwrap();
    assert!(within(20, confirm).await.unwrap().is_ack(), "confirmed");
}

/// Waits until every running node in `nodes` has applied the group's log up to `index`.
async fn applied_everywhere(c: &Cluster, nodes: &[u64], index: u64) {
    for &id in nodes {
        c.until(id, QUEUES, "applied the leader's log", WAIT, |v| {
            v.applied >= Some(index)
        })
        .await;
    }
}

/// Polls node `id` (a follower) until it refuses the quorum queue `queue` with 405 naming
/// the leader at `leader_url` (S-CLU-11, S-CLU-13): its committed state knows the queue and it
/// learned who leads and where.
async fn refuses_naming(c: &Cluster, id: u64, queue: &str, leader_url: &str) {
    let conn = connect(&c.url(id)).await;
    let began = now();
    loop {
        let ch = within(20, conn.create_channel()).await.unwrap();
        let passive = QueueDeclareOptions {
            passive: true,
            ..durable()
        };
        let err = within(
            20,
            ch.queue_declare(queue.into(), passive, FieldTable::default()),
        )
        .await
        .expect_err("a follower serves a quorum queue");
        assert_eq!(reply_code(&err), Some(405), "{err}");
        let text = reply_text(&err);
        if named_leader(&text).map(|a| url_of(&a)).as_deref() == Some(leader_url) {
            return;
        }
        assert!(
            began.elapsed() < WAIT,
            "node {id} does not name the leader {leader_url}: {text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Takes every message of `queue` with `basic.get`, acks them all, and checks with a last
/// `get-empty` that the acks committed (it is released only after them, S-CLU-1). Returns
/// (body, redelivered) in the order got.
async fn drain(ch: &Channel, queue: &str) -> Vec<(String, bool)> {
    let mut got = Vec::new();
    let mut last_tag = None;
    while let Some(m) = within(20, ch.basic_get(queue.into(), BasicGetOptions::default()))
        .await
        .unwrap()
    {
        got.push((
            String::from_utf8(m.delivery.data.clone()).unwrap(),
            m.delivery.redelivered,
        ));
        last_tag = Some(m.delivery.delivery_tag);
    }
    if let Some(tag) = last_tag {
        within(20, ch.basic_ack(tag, BasicAckOptions { multiple: true }))
            .await
            .unwrap();
        let empty = within(20, ch.basic_get(queue.into(), BasicGetOptions::default()))
            .await
            .unwrap();
        assert!(empty.is_none(), "{queue} drained");
    }
    got
}

/// S-CLU-1, S-CLU-10, S-CLU-11: three `wharf` processes form the queue group by themselves;
/// a quorum queue declared on its leader takes confirmed publishes, which every follower
/// commits and applies; a follower, whose committed state knows the queue, refuses it with 405
/// naming the leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_clu_10_a_quorum_queue_on_the_leader_is_committed_on_every_node() {
    let c = Cluster::start_refusing(3).await;
    let (leader, _) = c.leader(QUEUES, &[], 0, WAIT).await;
    let (url, _conn, ch) = find_leader(&c.url(leader), "qq").await;
    assert_eq!(url, c.url(leader));
    for i in 0..10 {
        publish_confirmed(&ch, "qq", format!("m{i}").as_bytes()).await;
    }
    // Every confirm was released once its entry committed: the leader's log now holds them.
    let view = c.view(leader, QUEUES).unwrap();
    let last = view.last_log.unwrap();
    let followers: Vec<u64> = (1..=3).filter(|id| *id != leader).collect();
    applied_everywhere(&c, &followers, last).await;
    for &id in &followers {
        refuses_naming(&c, id, "qq", &url).await;
    }
}

fn bodies(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i}")).collect()
}

/// S-CLU-2, S-CLU-6, S-CLU-9, S-CLU-13: 50 messages confirmed by the leader, two of them
/// acked and five delivered unacked to a consumer on it; SIGKILL of the leader (by its pid):
/// another node leads, a client that starts at a surviving node finds it through the 405's
/// address, and gets every confirmed message not acked exactly once, the five unacked ones
/// redelivered and no other. The killed node restarted on its directory catches up with the
/// new leader's log and names it when refusing the queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_clu_2_a_quorum_queue_survives_the_sigkill_of_its_leader() {
    let mut c = Cluster::start_refusing(3).await;
    let (leader, view) = c.leader(QUEUES, &[], 0, WAIT).await;
    let (_url, conn, ch) = find_leader(&c.url(leader), "qq").await;
    let sent = bodies("m", 50);
    for body in &sent {
        publish_confirmed(&ch, "qq", body.as_bytes()).await;
    }
    // A consumer with 5 unacked at most: it gets m0..m4, acks m0 and m1; m5 and m6 come only
    // once those acks committed (S-CLU-1). m2..m6 are then delivered and unacked.
    let consumer_ch = within(20, conn.create_channel()).await.unwrap();
    within(20, consumer_ch.basic_qos(5, BasicQosOptions::default()))
        .await
        .unwrap();
    let mut consumer = within(
        20,
        consumer_ch.basic_consume(
            "qq".into(),
            "c".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        ),
    )
    .await
    .unwrap();
    for (i, body) in sent.iter().enumerate().take(7) {
        let d = within(20, consumer.next()).await.unwrap().unwrap();
        assert_eq!(String::from_utf8_lossy(&d.data), *body);
        if i < 2 {
            within(20, d.ack(BasicAckOptions::default())).await.unwrap();
        }
    }

    c.kill(leader);
    let (next, _) = c.leader(QUEUES, &[leader], view.term, WAIT).await;
    let survivor = (1..=3).find(|id| *id != leader).unwrap();
    let (url, _conn2, ch2) = find_leader(&c.url(survivor), "qq").await;
    assert_eq!(url, c.url(next), "the client found the new leader");
    let got = drain(&ch2, "qq").await;
    let number = |b: &str| b[1..].parse::<usize>().unwrap();
    let mut got_sorted: Vec<&str> = got.iter().map(|(b, _)| b.as_str()).collect();
    got_sorted.sort_by_key(|b| number(b));
    let expected: Vec<&str> = sent[2..].iter().map(String::as_str).collect();
    assert_eq!(
        got_sorted, expected,
        "every confirmed message not acked, once"
    );
    for (body, redelivered) in &got {
        assert_eq!(
            *redelivered,
            number(body) < 7,
            "{body}: redelivered exactly when it had been delivered"
        );
    }

    // The killed node comes back on its directory and catches up.
    c.start_node(leader);
    let target = c.view(next, QUEUES).unwrap().last_log.unwrap();
    applied_everywhere(&c, &[leader], target).await;
    refuses_naming(&c, leader, "qq", &c.url(next)).await;
}

/// Node `id`'s management API answer to `GET path`, as JSON (`null` when none).
async fn api(c: &Cluster, id: u64, path: &str) -> serde_json::Value {
    c.api_request(id, "GET", path, None).await.1
}

/// The Raft term in node `id`'s aggregated Prometheus metrics.
async fn raft_term(c: &Cluster, id: u64) -> Option<u64> {
    let base = c.http_base(id, true);
    let text = tokio::task::spawn_blocking(move || {
        wharf_ctl::Client::anonymous(&base)
            .get("/metrics")
            .map_or(String::new(), |a| a.body)
    })
    .await
    .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("rabbitmq_raft_term_total "))
        .and_then(|v| v.parse().ok())
}

/// `(name, running)` of every node node `id`'s `/api/nodes` lists.
async fn nodes_seen(c: &Cluster, id: u64) -> Vec<(String, bool)> {
    let nodes = api(c, id, "/api/nodes").await;
    nodes
        .as_array()
        .map(|a| {
            a.iter()
                .map(|n| {
                    let name = n["name"].as_str().unwrap_or_default().to_owned();
                    (name, n["running"].as_bool().unwrap_or(false))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// S-CLU-40, S-CLU-41, S-CLU-43: each of three `wharf` processes lists the three nodes running
/// in `/api/nodes` and shows the quorum queue led by the leader; after the leader's SIGKILL
/// the survivors show it not running, the queue led by the new leader, and a higher Raft term
/// in their metrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_clu_40_the_api_and_metrics_show_the_nodes_and_a_leader_change() {
    let mut c = Cluster::start(3).await;
    let (leader, view) = c.leader(QUEUES, &[], 0, WAIT).await;
    let (_url, _conn, ch) = find_leader(&c.url(leader), "ops").await;
    publish_confirmed(&ch, "ops", b"m").await;
    let name = |id: u64| format!("wharf-{id}@127.0.0.1");
    for id in 1..=3 {
        let all: Vec<(String, bool)> = (1..=3).map(|i| (name(i), true)).collect();
        eventually(
            id,
            "three running nodes and the queue's leader",
            WAIT,
            || async {
                let seen = nodes_seen(&c, id).await;
                let q = api(&c, id, "/api/queues/%2F/ops").await;
                if seen != all
                    || q["leader"] != name(leader)
                    || q["online"].as_array().map(Vec::len) != Some(3)
                {
                    return Err(format!("{seen:?} {q}"));
                }
                Ok(())
            },
        )
        .await;
    }
    let term = raft_term(&c, leader).await.expect("the leader's term");
    assert!(
        term >= view.term,
        "metrics term {term}, status term {}",
        view.term
    );

    c.kill(leader);
    let (next, _) = c.leader(QUEUES, &[leader], view.term, WAIT).await;
    for id in (1..=3).filter(|id| *id != leader) {
        let expected: Vec<(String, bool)> = (1..=3).map(|i| (name(i), i != leader)).collect();
        eventually(
            id,
            "the killed leader not running, the new one leading",
            WAIT,
            || async {
                let seen = nodes_seen(&c, id).await;
                let q = api(&c, id, "/api/queues/%2F/ops").await;
                let t = raft_term(&c, id).await;
                if seen != expected || q["leader"] != name(next) || t <= Some(term) {
                    return Err(format!("{seen:?} {t:?} {q}"));
                }
                Ok(())
            },
        )
        .await;
    }
}

/// S-CLU-2, S-CLU-9: the SIGKILL of a follower changes nothing for the leader's clients: the
/// same connection keeps publishing with confirms (the leader and the other follower are a
/// majority) and consuming; the follower restarted catches up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_clu_9_a_followers_sigkill_changes_nothing_for_the_leaders_clients() {
    let mut c = Cluster::start(3).await;
    let (leader, _) = c.leader(QUEUES, &[], 0, WAIT).await;
    let (_url, _conn, ch) = find_leader(&c.url(leader), "qq").await;
    let before = bodies("a", 10);
    for body in &before {
        publish_confirmed(&ch, "qq", body.as_bytes()).await;
    }
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    c.kill(follower);
    let after = bodies("b", 10);
    for body in &after {
        publish_confirmed(&ch, "qq", body.as_bytes()).await;
    }
    let got: Vec<String> = drain(&ch, "qq").await.into_iter().map(|(b, _)| b).collect();
    let expected: Vec<String> = before.into_iter().chain(after).collect();
    assert_eq!(got, expected, "every message, in publish order");
    c.start_node(follower);
    let target = c.view(leader, QUEUES).unwrap().last_log.unwrap();
    applied_everywhere(&c, &[follower], target).await;
}

/// S-CLU-3, S-CLU-12: the leader cut off from both others (its process running) is replaced;
/// what it is asked meanwhile is never confirmed. Healed, it follows the new leader without a
/// restart: its connections are closed with 320, and a new connection finds its classic queue
/// (its own log) served again, the quorum queue refused naming the new leader, whose log the
/// old leader catches up with; the message published to it while cut off is nowhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_clu_12_a_deposed_leader_serves_again_as_a_follower() {
    let c = Cluster::start_refusing(3).await;
    let (leader, view) = c.leader(QUEUES, &[], 0, WAIT).await;
    let (_url, conn, ch) = find_leader(&c.url(leader), "qq").await;
    within(
        20,
        ch.queue_declare("cq".into(), durable(), FieldTable::default()),
    )
    .await
    .unwrap();
    publish_confirmed(&ch, "qq", b"before").await;
    publish_confirmed(&ch, "cq", b"classic").await;

    c.proxy().partition(&[leader], c.size());
    let (next, _) = c.leader(QUEUES, &[leader], view.term, WAIT).await;
    // Cut off, the old leader cannot commit: this publish is never confirmed.
    let lost = within(
        20,
        ch.basic_publish(
            "".into(),
            "qq".into(),
            BasicPublishOptions::default(),
            b"lost",
            BasicProperties::default().with_delivery_mode(2),
        ),
    )
    .await
    .unwrap();
    let survivor = (1..=3).find(|id| *id != leader).unwrap();
    let (url, _conn2, ch2) = find_leader(&c.url(survivor), "qq").await;
    assert_eq!(url, c.url(next));
    publish_confirmed(&ch2, "qq", b"after").await;

    c.proxy().heal();
    // The old leader's connection is closed (320), the unconfirmed publish with it.
    let confirmed = tokio::time::timeout(WAIT, lost).await.expect("settled");
    assert!(
        !matches!(confirmed, Ok(ref c) if c.is_ack()),
        "a publish the old leader could not commit was confirmed: {confirmed:?}"
    );
    let began = now();
    while conn.status().connected() {
        assert!(
            began.elapsed() < WAIT,
            "the old leader's connection stays open"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The same process serves again, as a follower (its log line read from its pipe, which
    // may come after the client saw the close).
    let began = now();
    while !c.output(leader).contains("serving as a follower") {
        assert!(began.elapsed() < WAIT, "{}", c.output(leader));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let back = connect(&c.url(leader)).await;
    let classic = within(20, back.create_channel()).await.unwrap();
    let m = within(
        20,
        classic.basic_get("cq".into(), BasicGetOptions::default()),
    )
    .await
    .unwrap()
    .expect("the classic queue's message");
    assert_eq!(m.delivery.data, b"classic");
    refuses_naming(&c, leader, "qq", &c.url(next)).await;
    let target = c.view(next, QUEUES).unwrap().last_log.unwrap();
    applied_everywhere(&c, &[leader], target).await;
    let got: Vec<String> = drain(&ch2, "qq")
        .await
        .into_iter()
        .map(|(b, _)| b)
        .collect();
    assert_eq!(got, ["before", "after"]);
}

/// A free port in place of each port the README names, the same one each time.
#[derive(Default)]
struct Ports(std::collections::BTreeMap<String, String>);

impl Ports {
    fn of(&mut self, p: &str) -> String {
        if let Some(port) = self.0.get(p) {
            return port.clone();
        }
        let port = loop {
            let port = crate::support::free_port().to_string();
            if !self.0.values().any(|taken| *taken == port) {
                break port;
            }
        };
        self.0.insert(p.to_owned(), port.clone());
        port
    }
}

/// The README's `sh` block as commands to run: each line's program and arguments, with the
/// shell's `NAME=value` variables expanded, `&` dropped, every port replaced by its free
/// port and every data directory put under `dir`.
fn readme_commands(
    block: &str,
    dir: &std::path::Path,
    ports: &mut Ports,
) -> Vec<(String, Vec<String>)> {
    let mut vars = std::collections::BTreeMap::<String, String>::new();
    let mut commands = Vec::new();
    for line in block.lines() {
        let mut words = line.split_whitespace();
        let program = words.next().expect("a command");
        if let Some((name, value)) = program.split_once('=') {
            vars.insert(format!("${name}"), value.to_owned());
            continue;
        }
        let mut args: Vec<String> = Vec::new();
        let mut data_dir = false;
        for word in words.filter(|w| *w != "&") {
            let word = vars.get(word).map_or(word, String::as_str);
            args.push(if data_dir {
                dir.join(word).display().to_string()
            } else if word.chars().all(|c| c.is_ascii_digit()) {
                ports.of(word)
            } else if word.contains("127.0.0.1:") {
                word.split(',')
                    .map(|a| {
                        let (ip, p) = a.split_once(':').unwrap();
                        format!("{ip}:{}", ports.of(p))
                    })
                    .collect::<Vec<_>>()
                    .join(",")
            } else {
                word.to_owned()
            });
            data_dir = word == "--data-dir";
        }
        commands.push((program.to_owned(), args));
    }
    commands
}

/// `wharfctl` with `args`: its output, when it succeeds.
fn wharfctl(args: &[String]) -> Option<String> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_wharfctl"))
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// README, "Three nodes on one machine": its `sh` block, run as written but with a free port
/// in place of each port it names and a temporary directory for each data directory: the
/// three nodes form the groups, `wharfctl cluster_status` prints what the README shows (the
/// node, its AMQP address, group 1's leader), and a client at group 1's leader declares a
/// quorum queue and gets a confirm (S-CLU-14).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_three_nodes_on_one_machine() {
    let readme = include_str!("../../README.md");
    let section = readme
        .split("### Three nodes on one machine")
        .nth(1)
        .expect("the README's section");
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("its sh block");
    let dir = tempfile::tempdir().unwrap();
    let mut ports = Ports::default();
    let mut nodes = Vec::new();
    let mut status_args = None;
    for (program, args) in readme_commands(block, dir.path(), &mut ports) {
        match program.as_str() {
            "wharf" => {
                let bin = env!("CARGO_BIN_EXE_wharf");
                // Started together, as in three terminals: a new cluster's nodes wait for
                // each other before they serve (S-CLU-20).
                nodes.push(crate::support::binary::Broker::launch_exact(bin, &args));
            }
            "wharfctl" => status_args = Some(args),
            other => panic!("the README runs {other}"),
        }
    }
    assert_eq!(nodes.len(), 3, "three nodes");
    // Held to the end: a Broker dropped is killed.
    let _running: Vec<_> = nodes
        .into_iter()
        .map(|n| tokio::task::block_in_place(|| n.wait()))
        .collect();
    let status_args = status_args.expect("the README asks cluster_status");
    // As the README says: node 1's status names its AMQP address and group 1's leader.
    let began = now();
    let (text, leader) = loop {
        if let Some(text) = wharfctl(&status_args)
            && let Some((1, groups)) = wharf_cluster::status::parse(&text)
            && let Some(leader) = groups
                .iter()
                .find(|g| g.group == QUEUES)
                .and_then(|g| g.leader)
            && groups.iter().any(|g| g.group == 0)
        {
            break (text, leader);
        }
        assert!(
            began.elapsed() < WAIT,
            "no leader of group 1 in {status_args:?}: {:?}",
            wharfctl(&status_args)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let amqp_1 = format!("127.0.0.1:{}", ports.of("5672"));
    assert_eq!(
        wharf_cluster::status::parse_amqp(&text).as_deref(),
        Some(amqp_1.as_str()),
        "{text}"
    );
    // The leader's AMQP address, from its own status.
    let leader_cluster = format!("127.0.0.1:{}", ports.of(&(25671 + leader).to_string()));
    let leader_text = wharfctl(&[
        "cluster_status".to_owned(),
        "--cluster".to_owned(),
        leader_cluster,
    ])
    .expect("the leader's status");
    let amqp = wharf_cluster::status::parse_amqp(&leader_text).expect("the leader's AMQP address");
    assert_eq!(
        amqp,
        format!("127.0.0.1:{}", ports.of(&(5671 + leader).to_string()))
    );
    let (url, _conn, ch) = find_leader(&url_of(&amqp), "orders").await;
    assert_eq!(url, url_of(&amqp));
    publish_confirmed(&ch, "orders", b"order-1").await;
}

/// S-CLU-70, S-CLU-73, S-CLU-1: three `wharf` processes forwarding over the cluster link (their
/// default); a client of a follower declares a quorum queue, publishes 200 messages with
/// confirms (every one acked) and consumes them through the same node with a prefetch of 20,
/// each exactly once, in publish order, none redelivered; nothing is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_clu_70_a_followers_client_publishes_and_consumes_through_the_leader() {
    let c = Cluster::start(3).await;
    let (leader, _) = c.leader(QUEUES, &[], 0, WAIT).await;
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    // Until the follower hears its leader it cannot forward (S-CLU-70 refuses then).
    c.until(follower, QUEUES, "knows its leader", WAIT, |v| {
        v.leader == Some(leader)
    })
    .await;
    let conn = connect(&c.url(follower)).await;
    let ch = within(20, conn.create_channel()).await.unwrap();
    within(20, ch.confirm_select(ConfirmSelectOptions::default()))
        .await
        .unwrap();
    within(20, ch.queue_declare("qq".into(), durable(), quorum()))
        .await
        .unwrap();
    let sent = bodies("m", 200);
    let mut confirms = Vec::new();
    for body in &sent {
        let confirm = within(
            20,
            ch.basic_publish(
                "".into(),
                "qq".into(),
                BasicPublishOptions::default(),
                body.as_bytes(),
                BasicProperties::default().with_delivery_mode(2),
            ),
        )
        .await
        .unwrap();
        confirms.push(confirm);
    }
    for confirm in confirms {
        assert!(within(20, confirm).await.unwrap().is_ack(), "confirmed");
    }
    // A fresh channel moves once the follower's committed state knows the queue (S-CLU-70).
    let last = c.view(leader, QUEUES).unwrap().last_log.unwrap();
    applied_everywhere(&c, &[follower], last).await;
    let consuming = within(20, conn.create_channel()).await.unwrap();
    within(20, consuming.basic_qos(20, BasicQosOptions::default()))
        .await
        .unwrap();
    let mut consumer = within(
        20,
        consuming.basic_consume(
            "qq".into(),
            "relayed".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        ),
    )
    .await
    .unwrap();
    for body in &sent {
        let d = within(20, consumer.next()).await.unwrap().unwrap();
        assert_eq!(String::from_utf8_lossy(&d.data), *body);
        assert!(!d.redelivered, "{body} delivered once");
        within(20, d.ack(BasicAckOptions::default())).await.unwrap();
    }
    let more = tokio::time::timeout(Duration::from_millis(300), consumer.next()).await;
    assert!(more.is_err(), "a delivery after the last: {more:?}");
    assert_eq!(crate::support::ready_count(&ch, "qq").await, 0);
}
