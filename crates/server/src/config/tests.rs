#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::net::SocketAddr;

use std::path::PathBuf;

use super::error::invalid;
use super::*;
use crate::alarm::MemoryLimit;
use crate::users::Users;
use wharf_base::limits;

const FULL: &str = r#"
bind = "0.0.0.0"
port = 5673
data_dir = "/var/lib/wharf"
mgmt_port = 15673
log = "debug"
heartbeat_secs = 30
loopback_users = ["guest", "local"]

[[users]]
name = "app"
password = "s3cret"
vhosts = ["prod", "/"]

[[users]]
name = "local"
password = "pw"

[[users]]
name = "admin"
password = "root"
vhosts = ["*"]

[[vhosts]]
name = "prod"
"#;

fn peer(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

#[test]
fn parses_a_full_file() {
    let c = merge(FileConfig::parse(FULL).unwrap(), Overrides::default()).unwrap();
    assert_eq!(c.bind, "0.0.0.0");
    assert_eq!(c.port, 5673);
    assert_eq!(c.data_dir, PathBuf::from("/var/lib/wharf"));
    assert_eq!(c.mgmt_port, 15673);
    assert_eq!(c.log, "debug");
    assert_eq!(c.heartbeat_secs, 30);
    assert_eq!(c.vhosts, vec!["prod".to_owned()]);
    let names: Vec<&str> = c.users.iter().map(|u| u.name.as_str()).collect();
    assert_eq!(names, ["app", "local", "admin", "guest"]);
    let by = |n: &str| c.users.iter().find(|u| u.name == n).unwrap();
    assert!(by("guest").loopback_only);
    assert!(by("local").loopback_only);
    assert!(!by("app").loopback_only);
    assert_eq!(by("local").vhosts, ["/"]);
    assert_eq!(by("app").vhosts, ["prod", "/"]);
    let s = c.server_config().unwrap();
    assert_eq!(s.bind, "0.0.0.0:5673");
    assert_eq!(s.heartbeat_secs, 30);
    assert!(s.users.may_open("admin", "anything"));
    assert!(s.users.may_open("app", "prod"));
    assert!(!s.users.may_open("app", "other"));
    assert!(!s.users.may_open("nobody", "/"));
}

#[test]
fn an_empty_file_gives_the_defaults() {
    let c = merge(FileConfig::parse("").unwrap(), Overrides::default()).unwrap();
    assert_eq!(c.bind, defaults::BIND);
    assert_eq!(c.port, 5672);
    assert_eq!(c.mgmt_port, 15672);
    assert_eq!(c.log, "info");
    assert_eq!(c.heartbeat_secs, 60);
    assert_eq!(c.users, Users::default().0);
    assert!(c.vhosts.is_empty());
}

#[test]
fn unknown_keys_are_named() {
    let e = FileConfig::parse("prot = 5672\n").unwrap_err().to_string();
    assert!(e.contains("prot"), "{e}");
    let e = FileConfig::parse("[[users]]\nname = \"a\"\npassword = \"b\"\nvhost = []\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("vhost"), "{e}");
}

#[test]
fn wrong_types_name_the_key() {
    let e = FileConfig::parse("port = \"five\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("port"), "{e}");
    let e = FileConfig::parse("loopback_users = \"guest\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("loopback_users"), "{e}");
}

#[test]
fn flags_override_the_file() {
    let file = FileConfig::parse(FULL).unwrap();
    let flags = Overrides {
        bind: Some("127.0.0.2".into()),
        port: Some(0),
        data_dir: Some("/tmp/x".into()),
        mgmt_port: None,
        log: Some("warn".into()),
        ..Overrides::default()
    };
    let c = merge(file, flags).unwrap();
    assert_eq!(c.bind, "127.0.0.2");
    assert_eq!(c.port, 0);
    assert_eq!(c.data_dir, PathBuf::from("/tmp/x"));
    assert_eq!(c.mgmt_port, 15673, "not given as a flag: the file's");
    assert_eq!(c.log, "warn");
}

#[test]
fn out_of_range_values_are_refused_by_key() {
    for (text, key) in [
        ("port = 70000", "port"),
        ("mgmt_port = 65536", "mgmt_port"),
        ("heartbeat_secs = 65536", "heartbeat_secs"),
        ("bind = \"\"", "bind"),
        ("[[users]]\nname = \"\"\npassword = \"x\"", "users[0].name"),
        ("[[vhosts]]\nname = \"\"", "vhosts[0].name"),
        (
            "[[users]]\nname = \"a\"\npassword = \"x\"\nvhosts = [\"\"]",
            "users[0].vhosts[0]",
        ),
    ] {
        let e = merge(FileConfig::parse(text).unwrap(), Overrides::default()).unwrap_err();
        match e {
            ConfigError::Invalid { key: k, .. } => assert_eq!(k, key, "{text}"),
            ConfigError::Parse(p) => panic!("{text}: {p}"),
        }
    }
    // A negative port is a type error from the parser, still naming the key.
    let e = FileConfig::parse("port = -1").unwrap_err().to_string();
    assert!(e.contains("port"), "{e}");
}

#[test]
fn resource_limits_parse_with_units_and_defaults() {
    let c = merge(FileConfig::default(), Overrides::default()).unwrap();
    assert_eq!(c.disk_free_limit_bytes, 50_000_000);
    assert_eq!(c.memory_high_watermark, MemoryLimit::Fraction(0.4));
    assert_eq!(c.connection_max, u64::from(limits::CONNECTIONS_MAX));
    assert_eq!(c.flow_ready_high, limits::FLOW_READY_HIGH as u64);
    assert_eq!(c.channel_max, 2047);
    assert_eq!(c.frame_max, 131_072);
    assert_eq!(c.max_message_size, 128 * 1024 * 1024);
    let text = "disk_free_limit = \"2GB\"\nmemory_high_watermark = 0.6\n\
                    connection_max = 10\nchannel_max = 16\nframe_max = 8192\n\
                    max_message_size = 1048576\nunacked_per_channel_max = 100\n\
                    flow_ready_high = 0\n";
    let c = merge(FileConfig::parse(text).unwrap(), Overrides::default()).unwrap();
    assert_eq!(c.disk_free_limit_bytes, 2_000_000_000);
    assert_eq!(c.memory_high_watermark, MemoryLimit::Fraction(0.6));
    let s = c.server_config().unwrap();
    assert_eq!(s.connection_max, 10);
    assert_eq!(s.channel_max, 16);
    assert_eq!(s.frame_max, 8192);
    assert_eq!(s.message_bytes_max, 1_048_576);
    assert_eq!(s.unacked_per_channel_max, 100);
    assert_eq!(s.flow_ready_high, 0, "S-FLOW-1: off");
    assert_eq!(s.disk_free_limit_bytes, 2_000_000_000);
    let text = "disk_free_limit = 1000\nmemory_high_watermark = \"512MiB\"\n";
    let c = merge(FileConfig::parse(text).unwrap(), Overrides::default()).unwrap();
    assert_eq!(c.disk_free_limit_bytes, 1000);
    assert_eq!(c.memory_high_watermark, MemoryLimit::Bytes(512 << 20));
    let text = "memory_high_watermark = 1073741824\n";
    let c = merge(FileConfig::parse(text).unwrap(), Overrides::default()).unwrap();
    assert_eq!(c.memory_high_watermark, MemoryLimit::Bytes(1 << 30));
}

#[test]
fn resource_flags_override_the_file() {
    let text = "disk_free_limit = \"1GB\"\nmemory_high_watermark = 0.6\n\
                    connection_max = 10\nheartbeat_secs = 5\n";
    let flags = Overrides {
        disk_free_limit: Some("100MB".into()),
        memory_high_watermark: Some("0.25".into()),
        connection_max: Some(3),
        heartbeat_secs: Some(0),
        ..Overrides::default()
    };
    let c = merge(FileConfig::parse(text).unwrap(), flags).unwrap();
    assert_eq!(c.disk_free_limit_bytes, 100_000_000);
    assert_eq!(c.memory_high_watermark, MemoryLimit::Fraction(0.25));
    assert_eq!(c.connection_max, 3);
    assert_eq!(c.heartbeat_secs, 0);
    let flags = Overrides {
        memory_high_watermark: Some("2GiB".into()),
        ..Overrides::default()
    };
    let c = merge(FileConfig::default(), flags).unwrap();
    assert_eq!(c.memory_high_watermark, MemoryLimit::Bytes(2 << 30));
}

#[test]
fn resource_limits_out_of_range_are_refused_by_key() {
    for (text, key) in [
        ("disk_free_limit = \"50XB\"", "disk_free_limit"),
        ("disk_free_limit = \"lots\"", "disk_free_limit"),
        ("disk_free_limit = 0.5", "disk_free_limit"),
        ("disk_free_limit = \"99999999999GB\"", "disk_free_limit"),
        ("memory_high_watermark = 1.5", "memory_high_watermark"),
        ("memory_high_watermark = 0.0", "memory_high_watermark"),
        ("memory_high_watermark = 0", "memory_high_watermark"),
        ("memory_high_watermark = \"0.x\"", "memory_high_watermark"),
        ("connection_max = 0", "connection_max"),
        ("connection_max = 65537", "connection_max"),
        ("channel_max = 0", "channel_max"),
        ("channel_max = 2048", "channel_max"),
        ("frame_max = 4095", "frame_max"),
        ("frame_max = 131073", "frame_max"),
        ("max_message_size = 0", "max_message_size"),
        ("max_message_size = 536870913", "max_message_size"),
        ("unacked_per_channel_max = 0", "unacked_per_channel_max"),
        ("unacked_per_channel_max = 65536", "unacked_per_channel_max"),
    ] {
        let e = merge(FileConfig::parse(text).unwrap(), Overrides::default()).unwrap_err();
        match e {
            ConfigError::Invalid { key: k, .. } => assert_eq!(k, key, "{text}"),
            ConfigError::Parse(p) => panic!("{text}: {p}"),
        }
    }
    let flags = Overrides {
        disk_free_limit: Some("12 parsecs".into()),
        ..Overrides::default()
    };
    let e = merge(FileConfig::default(), flags).unwrap_err();
    assert!(matches!(e, ConfigError::Invalid { ref key, .. } if key == "disk_free_limit"));
    // Wrong types and unknown keys are the parser's, and name the key.
    let e = FileConfig::parse("channel_max = \"many\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("channel_max"), "{e}");
    let e = FileConfig::parse("disk_free_limit = [1]\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("disk_free_limit"), "{e}");
    let e = FileConfig::parse("vm_memory_high_watermark = 0.4\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("vm_memory_high_watermark"), "{e}");
}

#[test]
fn sizes_use_rabbitmq_units() {
    assert_eq!(parse_bytes("50MB"), Ok(50_000_000));
    assert_eq!(parse_bytes("50M"), Ok(50 << 20));
    assert_eq!(parse_bytes("1GiB"), Ok(1 << 30));
    assert_eq!(parse_bytes("2kB"), Ok(2000));
    assert_eq!(parse_bytes("2k"), Ok(2048));
    assert_eq!(parse_bytes("123"), Ok(123));
    assert!(parse_bytes("").is_err());
    assert!(parse_bytes("MB").is_err());
    assert!(parse_bytes("-5MB").is_err());
    assert!(parse_bytes("99999999999999999999").is_err());
}

#[test]
fn tls_needs_both_files_and_the_flag_beats_the_file_port() {
    let text = "[tls]\ncert_file = \"c.pem\"\nkey_file = \"k.pem\"\n";
    let c = merge(FileConfig::parse(text).unwrap(), Overrides::default()).unwrap();
    let tls = c.tls.clone().unwrap();
    assert_eq!(tls.port, 5671);
    assert_eq!(tls.cert_file, PathBuf::from("c.pem"));
    let s = c.server_config().unwrap();
    assert_eq!(s.tls.unwrap().bind, "127.0.0.1:5671");
    let flags = Overrides {
        tls_port: Some(5000),
        ..Overrides::default()
    };
    let with_port = format!("{text}port = 6000\n");
    let c = merge(FileConfig::parse(&with_port).unwrap(), flags).unwrap();
    assert_eq!(c.tls.unwrap().port, 5000);
    let e = merge(
        FileConfig::parse("[tls]\ncert_file = \"c.pem\"\n").unwrap(),
        Overrides::default(),
    )
    .unwrap_err();
    assert_eq!(
        e,
        invalid("tls.key_file", "missing (tls.cert_file is given)")
    );
    let e = merge(
        FileConfig::parse(&format!("{text}port = 70000\n")).unwrap(),
        Overrides::default(),
    )
    .unwrap_err();
    assert!(matches!(e, ConfigError::Invalid { key, .. } if key == "tls.port"));
    let c = merge(FileConfig::default(), Overrides::default()).unwrap();
    assert_eq!(c.tls, None, "no [tls]: no AMQPS");
}

#[test]
fn mgmt_tls_needs_both_files_and_defaults_to_15671() {
    let text = "[mgmt_tls]\ncert_file = \"c.pem\"\nkey_file = \"k.pem\"\n";
    let c = merge(FileConfig::parse(text).unwrap(), Overrides::default()).unwrap();
    let t = c.mgmt_tls.clone().unwrap();
    assert_eq!(t.port, 15671);
    assert_eq!(t.key_file, PathBuf::from("k.pem"));
    assert_eq!(c.tls, None, "[mgmt_tls] is not AMQPS");
    let s = c.server_config().unwrap();
    let listener = s.mgmt_tls.unwrap();
    assert_eq!(listener.bind, "127.0.0.1:15671");
    assert_eq!(listener.cert_file, PathBuf::from("c.pem"));
    assert_eq!(
        s.mgmt_bind.as_deref(),
        Some("127.0.0.1:15672"),
        "plain HTTP stays"
    );
    let c = merge(
        FileConfig::parse(&format!("{text}port = 8443\n")).unwrap(),
        Overrides::default(),
    )
    .unwrap();
    assert_eq!(
        c.server_config().unwrap().mgmt_tls.unwrap().bind,
        "127.0.0.1:8443"
    );
    let e = merge(
        FileConfig::parse("[mgmt_tls]\nkey_file = \"k.pem\"\n").unwrap(),
        Overrides::default(),
    )
    .unwrap_err();
    assert_eq!(
        e,
        invalid("mgmt_tls.cert_file", "missing (mgmt_tls.key_file is given)")
    );
    let e = merge(
        FileConfig::parse(&format!("{text}port = 65536\n")).unwrap(),
        Overrides::default(),
    )
    .unwrap_err();
    assert!(matches!(e, ConfigError::Invalid { key, .. } if key == "mgmt_tls.port"));
    let e = FileConfig::parse("[mgmt_tls]\ncertfile = \"c.pem\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("certfile"), "{e}");
    let c = merge(FileConfig::default(), Overrides::default()).unwrap();
    assert_eq!(c.mgmt_tls, None);
    assert_eq!(c.server_config().unwrap().mgmt_tls, None);
}

#[test]
fn message_memory_bytes_takes_units_and_reaches_the_server() {
    let merged = |text: &str| merge(FileConfig::parse(text).unwrap(), Overrides::default());
    let c = merged("").unwrap();
    assert_eq!(c.message_memory_bytes, 16 << 20);
    for (text, want) in [
        ("message_memory_bytes = \"8MiB\"", 8 << 20),
        ("message_memory_bytes = 0", 0),
    ] {
        let c = merged(text).unwrap();
        assert_eq!(c.message_memory_bytes, want, "{text}");
        assert_eq!(c.server_config().unwrap().message_memory_bytes, want);
    }
    assert!(merged("message_memory_bytes = \"lots\"").is_err());
}

#[test]
fn checkpoint_log_bytes_min_takes_units_and_is_bounded() {
    let c = merge(FileConfig::default(), Overrides::default()).unwrap();
    assert_eq!(c.checkpoint_log_bytes_min, 64 << 20);
    assert_eq!(
        c.server_config().unwrap().checkpoint_log_bytes_min,
        limits::CHECKPOINT_LOG_BYTES_MIN
    );
    for (text, bytes) in [
        ("checkpoint_log_bytes_min = \"256MiB\"", 256 << 20),
        ("checkpoint_log_bytes_min = 1048576", 1 << 20),
        ("checkpoint_log_bytes_min = \"4GiB\"", 4 << 30),
    ] {
        let c = merge(FileConfig::parse(text).unwrap(), Overrides::default()).unwrap();
        assert_eq!(c.checkpoint_log_bytes_min, bytes, "{text}");
        assert_eq!(c.server_config().unwrap().checkpoint_log_bytes_min, bytes);
    }
    for text in [
        "checkpoint_log_bytes_min = 1048575",
        "checkpoint_log_bytes_min = 0",
        "checkpoint_log_bytes_min = \"5GiB\"",
        "checkpoint_log_bytes_min = 0.5",
        "checkpoint_log_bytes_min = \"lots\"",
    ] {
        let e = merge(FileConfig::parse(text).unwrap(), Overrides::default()).unwrap_err();
        assert!(
            matches!(e, ConfigError::Invalid { ref key, .. } if key == "checkpoint_log_bytes_min"),
            "{text}: {e}"
        );
    }
}

#[test]
fn fsync_accepts_only_always() {
    let c = merge(FileConfig::default(), Overrides::default()).unwrap();
    assert_eq!(c.fsync, FsyncPolicy::Always);
    let c = merge(
        FileConfig::parse("fsync = \"always\"").unwrap(),
        Overrides::default(),
    )
    .unwrap();
    assert_eq!(c.fsync, FsyncPolicy::Always);
    for value in ["never", "none", "batch", "Always", ""] {
        let text = format!("fsync = \"{value}\"");
        let e = merge(FileConfig::parse(&text).unwrap(), Overrides::default()).unwrap_err();
        match e {
            ConfigError::Invalid { key, reason } => {
                assert_eq!(key, "fsync");
                // S-OPS-5: operators read why, not a spec id.
                assert!(reason.contains("fdatasync"), "{reason}");
                assert!(!reason.contains("S-DUR"), "{reason}");
            }
            ConfigError::Parse(p) => panic!("{text}: {p}"),
        }
    }
    let e = FileConfig::parse("fsync = true").unwrap_err().to_string();
    assert!(e.contains("fsync"), "{e}");
}

#[test]
fn user_tags_and_loopback_users_reach_the_server_config() {
    let text = "loopback_users = [\"ops\"]\n                    [[users]]\nname = \"ops\"\npassword = \"pw\"\ntags = [\"administrator\"]\n";
    let c = merge(FileConfig::parse(text).unwrap(), Overrides::default()).unwrap();
    let s = c.server_config().unwrap();
    assert_eq!(s.loopback_users, ["ops"]);
    let ops = s.users.0.iter().find(|u| u.name == "ops").unwrap();
    assert_eq!(ops.tags, ["administrator"]);
    assert!(!ops.initial_only, "a listed user is put at every start");
    let guest = s.users.0.iter().find(|u| u.name == "guest").unwrap();
    assert!(
        guest.initial_only,
        "the default guest only on a fresh data dir"
    );
}

#[test]
fn duplicate_users_are_refused() {
    let text = "[[users]]\nname = \"a\"\npassword = \"x\"\n\
                    [[users]]\nname = \"a\"\npassword = \"y\"\n";
    let e = merge(FileConfig::parse(text).unwrap(), Overrides::default()).unwrap_err();
    assert_eq!(e, invalid("users[1].name", "user 'a' is listed twice"));
}

#[test]
fn guest_is_dropped_only_by_default_user_false_or_replaced_by_a_listed_guest() {
    let text = "default_user = false\n[[users]]\nname = \"a\"\npassword = \"x\"\n";
    let c = merge(FileConfig::parse(text).unwrap(), Overrides::default()).unwrap();
    assert_eq!(c.users.len(), 1);
    assert_eq!(c.users[0].name, "a");
    let text = "[[users]]\nname = \"guest\"\npassword = \"other\"\n";
    let c = merge(FileConfig::parse(text).unwrap(), Overrides::default()).unwrap();
    assert_eq!(c.users.len(), 1);
    assert_eq!(c.users[0].password, "other");
    assert!(c.users[0].loopback_only, "guest stays in loopback_users");
}

#[test]
fn loopback_users_may_log_in_only_from_loopback() {
    let text = "loopback_users = [\"local\"]\n\
                    [[users]]\nname = \"local\"\npassword = \"pw\"\n\
                    [[users]]\nname = \"remote\"\npassword = \"pw\"\n";
    let c = merge(FileConfig::parse(text).unwrap(), Overrides::default()).unwrap();
    let users = Users(c.users);
    let far = peer("10.1.2.3:40000");
    assert_eq!(
        users.check("local", "pw", far),
        Some("user 'local' can only connect via localhost".to_owned())
    );
    assert_eq!(users.check("local", "pw", peer("127.0.0.1:40000")), None);
    assert_eq!(users.check("local", "pw", peer("[::1]:40000")), None);
    assert_eq!(users.check("remote", "pw", far), None);
    // guest is no longer in loopback_users here, so it may come from afar.
    assert_eq!(users.check("guest", "guest", far), None);
    // The default list restricts guest.
    let c = merge(FileConfig::default(), Overrides::default()).unwrap();
    assert!(Users(c.users).check("guest", "guest", far).is_some());
}

#[test]
fn wrong_password_and_unknown_user_get_rabbitmq_text() {
    let users = Users::default();
    let local = peer("127.0.0.1:1");
    let text = "Login was refused using authentication mechanism PLAIN. For details see \
                    the broker logfile.";
    assert_eq!(users.check("guest", "nope", local).as_deref(), Some(text));
    assert_eq!(users.check("nobody", "guest", local).as_deref(), Some(text));
}

#[test]
fn s_cons_9_consumer_timeout_defaults_to_30_minutes_and_must_be_positive() {
    let c = merge(FileConfig::default(), Overrides::default()).unwrap();
    assert_eq!(c.consumer_timeout_ms, 1_800_000);
    assert_eq!(
        c.server_config().unwrap().consumer_timeout_ms,
        Some(1_800_000)
    );
    let c = merge(
        FileConfig::parse("consumer_timeout = 5000\n").unwrap(),
        Overrides::default(),
    )
    .unwrap();
    assert_eq!(c.server_config().unwrap().consumer_timeout_ms, Some(5000));
    let e = merge(
        FileConfig::parse("consumer_timeout = 0\n").unwrap(),
        Overrides::default(),
    )
    .unwrap_err();
    assert!(
        matches!(e, ConfigError::Invalid { ref key, .. } if key == "consumer_timeout"),
        "{e:?}"
    );
}

#[test]
fn s_ops_1_prometheus_listens_on_15692_unless_moved_or_turned_off() {
    let c = merge(FileConfig::default(), Overrides::default()).unwrap();
    assert_eq!(c.prometheus_port, Some(15692));
    let s = c.server_config().unwrap();
    assert_eq!(s.prometheus_bind.as_deref(), Some("127.0.0.1:15692"));
    let file = FileConfig::parse("prometheus_port = 9419\n").unwrap();
    let c = merge(file.clone(), Overrides::default()).unwrap();
    assert_eq!(c.prometheus_port, Some(9419));
    let flags = Overrides {
        prometheus_port: Some(0),
        ..Overrides::default()
    };
    assert_eq!(merge(file, flags).unwrap().prometheus_port, Some(0));
    let off = FileConfig::parse("prometheus = false\nprometheus_port = 9419\n").unwrap();
    let c = merge(off, Overrides::default()).unwrap();
    assert_eq!(c.prometheus_port, None);
    assert_eq!(c.server_config().unwrap().prometheus_bind, None);
    let flags = Overrides {
        prometheus: Some(false),
        ..Overrides::default()
    };
    assert_eq!(
        merge(FileConfig::default(), flags).unwrap().prometheus_port,
        None
    );
    let e = merge(
        FileConfig::parse("prometheus_port = 70000\n").unwrap(),
        Overrides::default(),
    )
    .unwrap_err();
    assert!(
        matches!(e, ConfigError::Invalid { ref key, .. } if key == "prometheus_port"),
        "{e}"
    );
}

#[test]
fn s_net_1_bind_takes_one_host_or_a_list_and_defaults_to_both_loopbacks() {
    // Default: 127.0.0.1 required, ::1 where the host has IPv6.
    let s = merge(FileConfig::default(), Overrides::default())
        .unwrap()
        .server_config()
        .unwrap();
    assert_eq!(s.bind, "127.0.0.1:5672");
    assert_eq!(s.bind_if_available, vec!["[::1]:5672".to_owned()]);
    // A list in the file, a comma-separated flag: every host required, none optional.
    let file = FileConfig::parse("bind = [\"127.0.0.1\", \"::1\"]\nport = 5680\n").unwrap();
    let s = merge(file, Overrides::default())
        .unwrap()
        .server_config()
        .unwrap();
    assert_eq!(s.bind, "127.0.0.1:5680,[::1]:5680");
    assert!(s.bind_if_available.is_empty());
    assert_eq!(
        s.mgmt_bind.as_deref(),
        Some("127.0.0.1:15672"),
        "first host"
    );
    let flags = Overrides {
        bind: Some("::1, 127.0.0.1".into()),
        ..Overrides::default()
    };
    let s = merge(FileConfig::default(), flags)
        .unwrap()
        .server_config()
        .unwrap();
    assert_eq!(s.bind, "[::1]:5672,127.0.0.1:5672");
    assert!(s.bind_if_available.is_empty());
    // One host, as before.
    let file = FileConfig::parse("bind = \"0.0.0.0\"").unwrap();
    let s = merge(file, Overrides::default())
        .unwrap()
        .server_config()
        .unwrap();
    assert_eq!(s.bind, "0.0.0.0:5672");
    assert!(s.bind_if_available.is_empty());
    for bad in ["bind = \"127.0.0.1,\"", "bind = []"] {
        let e = merge(FileConfig::parse(bad).unwrap(), Overrides::default()).unwrap_err();
        assert!(e.to_string().contains("bind"), "{bad}: {e}");
    }
}

#[test]
fn cluster_keys_come_from_the_file_or_flags_and_go_together() {
    let file = FileConfig::parse(
        "cluster_listen = \"127.0.0.1:25672\"\ncluster_seeds = [\"127.0.0.1:25672\", \"127.0.0.2:25672\"]\n",
    )
    .unwrap();
    let c = merge(file.clone(), Overrides::default()).unwrap();
    assert_eq!(c.cluster_listen.as_deref(), Some("127.0.0.1:25672"));
    assert_eq!(
        c.cluster_seeds.as_deref(),
        Some("127.0.0.1:25672,127.0.0.2:25672")
    );
    let flags = Overrides {
        cluster_listen: Some("127.0.0.2:25672".into()),
        ..Overrides::default()
    };
    assert_eq!(
        merge(file, flags).unwrap().cluster_listen.as_deref(),
        Some("127.0.0.2:25672")
    );
    let alone = Overrides {
        cluster_listen: Some("127.0.0.1:25672".into()),
        ..Overrides::default()
    };
    let e = merge(FileConfig::default(), alone).unwrap_err().to_string();
    assert!(e.contains("cluster_listen"), "{e}");
}

/// S-CLU-70: a member forwards by default; `cluster_forward = false` (or the flag) turns it
/// off, the flag winning over the file.
#[test]
fn cluster_forward_is_on_unless_turned_off() {
    let none = merge(FileConfig::parse("").unwrap(), Overrides::default()).unwrap();
    assert!(none.cluster_forward);
    let file = FileConfig::parse("cluster_forward = false\n").unwrap();
    assert!(
        !merge(file.clone(), Overrides::default())
            .unwrap()
            .cluster_forward
    );
    let flags = Overrides {
        cluster_forward: Some(true),
        ..Overrides::default()
    };
    assert!(merge(file, flags).unwrap().cluster_forward);
}
