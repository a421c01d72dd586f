//! Command-line arguments of wharf-perf: parsing and validation into [`Command`]. Pure: no I/O,
//! no tokio, no AMQP connection. Option names follow RabbitMQ's PerfTest where one exists.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};

/// The default broker URI (RabbitMQ's and wharf's default port, vhost "/").
pub const DEFAULT_URI: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

/// Largest publisher-confirm window; a larger window only hides latency.
pub const CONFIRM_WINDOW_MAX: u32 = 65_535;
/// Largest message body the generator builds (wharf's `MESSAGE_BODY_BYTES_MAX`).
pub const MESSAGE_BYTES_MAX: usize = 512 * 1024 * 1024;
/// Most publishers or consumers in one run; each is a connection.
pub const CLIENTS_MAX: u32 = 1024;

/// What to do.
#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    /// Publish and/or consume and report rates and latencies.
    Run(RunConfig),
    /// The expiry scenario: mixed per-message TTLs into a queue with a dead-letter exchange.
    TtlMix(TtlMixConfig),
    /// Spawn the broker, prefill it, stop and restart it, and time the recovery.
    Recovery(RecoveryConfig),
    /// Serve as a null broker (to measure the generator's own ceiling).
    Sink {
        /// Address to listen on (loopback).
        listen: String,
        /// Body size of the deliveries it pushes.
        size_bytes: usize,
    },
    /// Print usage.
    Help,
}

/// A queue argument given as `--queue-arg key=value`.
#[derive(Clone, Debug, PartialEq)]
pub enum ArgValue {
    /// A value that parses as a signed integer (x-message-ttl, x-max-length, ...).
    Int(i64),
    /// `true` or `false`.
    Bool(bool),
    /// Anything else (x-dead-letter-exchange, x-queue-mode, ...).
    Str(String),
}

/// The queue the run uses (published to through the default exchange).
#[derive(Clone, Debug, PartialEq)]
pub struct QueueSpec {
    /// Queue name.
    pub name: String,
    /// Declare it durable.
    pub durable: bool,
    /// Declaration arguments, in the order given.
    pub args: Vec<(String, ArgValue)>,
    /// `--priorities N`: declare with `x-max-priority` N and publish with random priorities
    /// 0..N (0: a plain queue, no priority property).
    pub priorities: u8,
}

/// Options of a publish/consume run.
#[expect(
    clippy::struct_excessive_bools,
    reason = "each bool is an independent command-line flag"
)]
#[derive(Clone, Debug, PartialEq)]
pub struct RunConfig {
    /// Broker URI.
    pub uri: String,
    /// Publisher connections.
    pub producers: u32,
    /// Consumer connections.
    pub consumers: u32,
    /// Body size in bytes; bodies of 8 bytes or more carry the send time.
    pub size_bytes: usize,
    /// Publish with delivery-mode 2.
    pub persistent: bool,
    /// Outstanding unconfirmed messages per publisher; `None` publishes without confirms.
    pub confirm_window: Option<u32>,
    /// Consumer prefetch (basic.qos); 0 means unlimited.
    pub qos: u16,
    /// Consumers ack with `multiple` once every this many messages (1: one ack per message).
    pub multi_ack_every: u32,
    /// Consumers use no-ack mode.
    pub auto_ack: bool,
    /// The queue.
    pub queue: QueueSpec,
    /// Stop after this long (the run also stops when the message counts are reached).
    pub time: Option<Duration>,
    /// Messages per publisher.
    pub pmessages: Option<u64>,
    /// Messages per consumer.
    pub cmessages: Option<u64>,
    /// Purge the queue before starting.
    pub purge_before: bool,
    /// Purge the queue at the end.
    pub purge_after: bool,
    /// Delete the queue at the end.
    pub delete_after: bool,
    /// Process whose CPU time to report per message (the broker).
    pub broker_pid: Option<u32>,
    /// Print one JSON line instead of text.
    pub json: bool,
    /// Tokio worker threads (default: the number of CPUs).
    pub threads: Option<usize>,
    /// Target publish rate in msg/s, total across publishers and split evenly; 0 is as fast as
    /// possible.
    pub rate: u64,
    /// The soak options (`--hold`, `--watch-dir`).
    pub soak: SoakConfig,
}

/// Soak options of a run: messages held unacked for the whole run, and the data directory
/// sampled against the queued bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct SoakConfig {
    /// Messages one extra consumer connection takes and never acks until the run ends (0: none).
    pub hold: u16,
    /// Directory whose size is sampled during the run.
    pub watch_dir: Option<PathBuf>,
    /// How often it is sampled.
    pub watch_every: Duration,
    /// The broker's WAL segment size, for the bound `2 x queued bytes + 2 segments`.
    pub segment_bytes: u64,
}

/// How `recovery` stops the broker it prefilled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StopMode {
    /// SIGTERM, then wait for the process to exit (a clean stop).
    Term,
    /// SIGKILL (a crash).
    Kill,
    /// Do not stop: prefill and measure memory and disk only ("memory while serving").
    None,
}

/// Options of the recovery scenario.
#[derive(Clone, Debug, PartialEq)]
pub struct RecoveryConfig {
    /// Broker URI (must match the port in the broker command).
    pub uri: String,
    /// The broker command: program, then arguments.
    pub broker: Vec<String>,
    /// The broker's data directory, measured with `du`'s accounting.
    pub dir: Option<PathBuf>,
    /// Remove `dir` before each round, with no broker running, so that rounds are independent.
    pub fresh: bool,
    /// Where the broker's stdout and stderr go (appended); `None` discards them.
    pub broker_log: Option<PathBuf>,
    /// Messages to prefill.
    pub messages: u64,
    /// Body size in bytes.
    pub size_bytes: usize,
    /// Durable queue to prefill.
    pub queue: String,
    /// Prefill publisher connections (`messages` must divide evenly).
    pub producers: u32,
    /// Prefill confirm window per publisher.
    pub confirm_window: u32,
    /// How the broker is stopped.
    pub stop: StopMode,
    /// Rounds; the report gives each and the medians.
    pub rounds: u32,
    /// After recovery, consume all messages and time it.
    pub drain: bool,
    /// Prefetch of the draining consumer.
    pub drain_qos: u16,
    /// The draining consumer acks with `multiple` every this many messages.
    pub drain_ack_every: u32,
    /// Interval of the polls (connect, passive declare).
    pub poll: Duration,
    /// Longest wait for any one step (the broker accepting, the queue count, the old broker's
    /// exit).
    pub step_timeout: Duration,
    /// Print one JSON line instead of text.
    pub json: bool,
}

/// Options of the TTL scenario.
#[derive(Clone, Debug, PartialEq)]
pub struct TtlMixConfig {
    /// Broker URI.
    pub uri: String,
    /// Messages to publish; half short-lived, half long-lived, in random order.
    pub messages: u64,
    /// TTL of the short-lived half, in milliseconds.
    pub short_ms: u64,
    /// TTL of the long-lived half, in milliseconds.
    pub long_ms: u64,
    /// Longest wait after the last publish for the queues to settle.
    pub wait: Duration,
    /// How often to poll the two queues' counts.
    pub poll: Duration,
    /// Source queue (deleted and re-declared with the dead-letter exchange).
    pub queue: String,
    /// Dead-letter exchange (fanout).
    pub dlx: String,
    /// Queue bound to the dead-letter exchange.
    pub dlq: String,
    /// Body size in bytes.
    pub size_bytes: usize,
    /// Publish with delivery-mode 2 into durable queues.
    pub persistent: bool,
    /// Publisher confirm window.
    pub confirm_window: u32,
    /// Seed of the shuffle that orders short and long messages.
    pub seed: u64,
    /// Leave the queues and exchange in place afterwards.
    pub keep: bool,
    /// Print one JSON line instead of text.
    pub json: bool,
}

/// wharf's WAL segment size (`limits::SEGMENT_BYTES_MAX`; the configuration cannot change it).
pub const SEGMENT_BYTES_DEFAULT: u64 = 64 * 1024 * 1024;

/// Usage text.
pub const USAGE: &str = "\
wharf-perf: AMQP 0-9-1 load generator (wharf or RabbitMQ)

usage: wharf-perf [run] [options]
       wharf-perf ttl-mix [options]
       wharf-perf rpc [--uri URI] [--callers N] [--time S] [--size BYTES] [--json]
           RPC round trips through direct reply-to, N callers with one request each in flight
       wharf-perf recovery --broker PATH --broker-arg ARG... [options]
       wharf-perf scale --broker-cmd \"PATH ARGS\" --uri URI [--queues N] [--connections N] ...
           many durable queues and connections: memory per object, start-up (`scale --help`)
       wharf-perf failover --uri URI --pid PID --uri URI --pid PID ... [options]
           a quorum queue's leader SIGKILLed under a publisher: time to its first confirm on
           the new leader (`failover --help`)
       wharf-perf sink [--listen 127.0.0.1:5680] [--size BYTES]
           a null broker that confirms and delivers without storing: the generator's ceiling

run options:
  --uri URI                 broker (default amqp://guest:guest@127.0.0.1:5672/%2f)
  -x, --producers N         publisher connections (default 1)
  -y, --consumers N         consumer connections (default 1)
  -s, --size BYTES          body size (default 16; >= 8 embeds the send time)
  -f, --persistent          delivery-mode 2
  -c, --confirm W           publisher confirms, W messages outstanding per publisher
  -q, --qos N               consumer prefetch (default 0 = unlimited)
  -A, --multi-ack-every K   ack with multiple=true every K messages (default 1)
  -a, --auto-ack            consume without acks
      --queue NAME          queue (default wharf-perf)
      --durable             declare the queue durable
      --queue-arg K=V       queue argument (repeatable); integers and true/false are typed
      --priorities N        a priority queue: declare it with x-max-priority N (1..255) and
                            publish with random priorities 0..N-1 (default 0: plain queue)
  -z, --time SECONDS        run for this long
  -C, --pmessages N         messages per publisher
  -D, --cmessages N         messages per consumer
      --purge-before        purge the queue before the run
      --purge-after         purge the queue after the run
      --delete-after        delete the queue after the run
      --broker-pid PID      report this process's CPU time per message
      --threads N           tokio worker threads
  -r, --rate N              publish N msg/s in total, split evenly across publishers (default
                            0 = as fast as possible); each publisher paces itself against a
                            schedule and, when behind, catches up at most a confirm window
                            (or 256 messages) per 1 ms wake-up
      --json                one JSON line instead of text
  soak (the disk figure):
      --hold N              one extra consumer takes N messages (prefetch N) and acks none
                            until the run ends
      --watch-dir DIR       sample DIR's size (allocated and apparent) and the queue's count
                            every --watch-every seconds (default 5); report the largest
                            allocated / (2 x queued bytes + 2 x --segment-bytes)
      --segment-bytes B     the broker's WAL segment size (default 67108864, wharf's
                            limits::SEGMENT_BYTES_MAX)

recovery options (also --uri, --size (default 100), --queue (default wharf-perf-recovery),
--producers (default 1), --confirm (default 1024), --json):
      --broker PATH         the broker program, spawned by wharf-perf (killed by its pid on
                            every exit path)
      --broker-arg ARG      one argument of it (repeatable, in order)
      --broker-cmd \"CMD\"    the whole command, split on whitespace (instead of the two above)
      --broker-log FILE     append the broker's stdout and stderr here (default: discarded)
      --dir DIR             the data directory to measure (default: the broker's --data-dir)
      --fresh               remove DIR before every round (no broker running), so rounds are
                            independent; without it a round purges the queue and refills it
      --messages N          messages to prefill (default 1000000)
      --stop term|kill|none SIGTERM and wait for exit (default), SIGKILL, or no restart
                            (prefill, RSS and disk only: memory while serving)
      --rounds K            rounds (default 1); medians are reported
      --drain               after recovery, consume all N and report the time and rate
      --drain-qos N         prefetch of the draining consumer (default 1000)
      --drain-ack-every K   its multiple-ack interval (default 100)
      --poll-ms MS          poll interval (default 2)
      --step-timeout S      longest wait for any one step (default 300)

ttl-mix options (also --uri, --size, --persistent, --confirm, --json):
      --messages N          messages (default 100000), half short, half long, shuffled
      --short-ms MS         short TTL (default 100)
      --long-ms MS          long TTL (default 3600000)
      --wait SECONDS        bounded wait after the last publish (default 5)
      --poll-ms MS          poll interval of the queue counts (default 50)
      --queue NAME --dlx NAME --dlq NAME   (defaults wharf-perf-ttl, -dlx, -dlq)
      --seed N              shuffle seed (default 1)
      --keep                keep the queues and exchange afterwards
";

/// Parses the arguments after the program name.
pub fn parse(args: &[String]) -> Result<Command> {
    match args.first().map(String::as_str) {
        Some("-h" | "--help" | "help") => Ok(Command::Help),
        Some("ttl-mix") => parse_ttl_mix(args.get(1..).unwrap_or_default()).map(Command::TtlMix),
        Some("sink") => parse_sink(args.get(1..).unwrap_or_default()),
        Some("recovery") => {
            parse_recovery(args.get(1..).unwrap_or_default()).map(Command::Recovery)
        }
        Some("run") => parse_run(args.get(1..).unwrap_or_default()).map(Command::Run),
        _ => parse_run(args).map(Command::Run),
    }
}

/// Walks `--flag value` pairs, handing each to `apply`.
struct Cursor<'a> {
    args: &'a [String],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn next_flag(&mut self) -> Option<&'a str> {
        let flag = self.args.get(self.at)?;
        self.at += 1;
        Some(flag.as_str())
    }

    fn value(&mut self, flag: &str) -> Result<&'a str> {
        let value = self
            .args
            .get(self.at)
            .with_context(|| format!("{flag} needs a value"))?;
        self.at += 1;
        Ok(value.as_str())
    }

    fn number<T: std::str::FromStr>(&mut self, flag: &str) -> Result<T> {
        let text = self.value(flag)?;
        text.parse()
            .map_err(|_| anyhow::anyhow!("{flag}: {text:?} is not a valid number"))
    }

    fn seconds(&mut self, flag: &str) -> Result<Duration> {
        let seconds: f64 = self.number(flag)?;
        Duration::try_from_secs_f64(seconds)
            .map_err(|_| anyhow::anyhow!("{flag}: {seconds} is not a valid duration"))
    }
}

fn parse_queue_arg(text: &str) -> Result<(String, ArgValue)> {
    let (key, value) = text
        .split_once('=')
        .with_context(|| format!("--queue-arg {text:?}: expected key=value"))?;
    if key.is_empty() || key.len() > 255 {
        bail!("--queue-arg {text:?}: the key must be 1 to 255 bytes");
    }
    let value = if let Ok(int) = value.parse::<i64>() {
        ArgValue::Int(int)
    } else if let Ok(boolean) = value.parse::<bool>() {
        ArgValue::Bool(boolean)
    } else {
        ArgValue::Str(value.to_owned())
    };
    Ok((key.to_owned(), value))
}

/// A run with every option at its default (no end: callers set one).
pub fn default_run() -> RunConfig {
    RunConfig {
        uri: DEFAULT_URI.to_owned(),
        producers: 1,
        consumers: 1,
        size_bytes: 16,
        persistent: false,
        confirm_window: None,
        qos: 0,
        multi_ack_every: 1,
        auto_ack: false,
        queue: QueueSpec {
            name: "wharf-perf".to_owned(),
            durable: false,
            args: Vec::new(),
            priorities: 0,
        },
        time: None,
        pmessages: None,
        cmessages: None,
        purge_before: false,
        purge_after: false,
        delete_after: false,
        broker_pid: None,
        json: false,
        threads: None,
        rate: 0,
        soak: SoakConfig {
            hold: 0,
            watch_dir: None,
            watch_every: Duration::from_secs(5),
            segment_bytes: SEGMENT_BYTES_DEFAULT,
        },
    }
}

fn parse_run(args: &[String]) -> Result<RunConfig> {
    let mut config = default_run();
    let mut cursor = Cursor { args, at: 0 };
    while let Some(flag) = cursor.next_flag() {
        match flag {
            "--uri" => cursor.value(flag)?.clone_into(&mut config.uri),
            "--producers" | "-x" => config.producers = cursor.number(flag)?,
            "--consumers" | "-y" => config.consumers = cursor.number(flag)?,
            "--size" | "-s" => config.size_bytes = cursor.number(flag)?,
            "--persistent" | "-f" => config.persistent = true,
            "--confirm" | "-c" => {
                let window: u32 = cursor.number(flag)?;
                config.confirm_window = (window > 0).then_some(window);
            }
            "--qos" | "-q" => config.qos = cursor.number(flag)?,
            "--multi-ack-every" | "-A" => config.multi_ack_every = cursor.number(flag)?,
            "--auto-ack" | "-a" => config.auto_ack = true,
            "--queue" | "-u" => cursor.value(flag)?.clone_into(&mut config.queue.name),
            "--durable" => config.queue.durable = true,
            "--priorities" => config.queue.priorities = cursor.number(flag)?,
            "--queue-arg" => config
                .queue
                .args
                .push(parse_queue_arg(cursor.value(flag)?)?),
            "--time" | "-z" => config.time = Some(cursor.seconds(flag)?),
            "--pmessages" | "-C" => config.pmessages = Some(cursor.number(flag)?),
            "--cmessages" | "-D" => config.cmessages = Some(cursor.number(flag)?),
            "--purge-before" => config.purge_before = true,
            "--purge-after" => config.purge_after = true,
            "--delete-after" => config.delete_after = true,
            "--broker-pid" => config.broker_pid = Some(cursor.number(flag)?),
            "--threads" => config.threads = Some(cursor.number(flag)?),
            "--rate" | "-r" => config.rate = cursor.number(flag)?,
            "--json" => config.json = true,
            "--hold" => config.soak.hold = cursor.number(flag)?,
            "--watch-dir" => config.soak.watch_dir = Some(cursor.value(flag)?.into()),
            "--watch-every" => config.soak.watch_every = cursor.seconds(flag)?,
            "--segment-bytes" => config.soak.segment_bytes = cursor.number(flag)?,
            other => bail!("unknown option {other:?} (try --help)"),
        }
    }
    validate_run(&config)?;
    Ok(config)
}

fn validate_run(config: &RunConfig) -> Result<()> {
    if config.producers == 0 && config.consumers == 0 {
        bail!("nothing to do: no producers and no consumers");
    }
    if config.producers > CLIENTS_MAX || config.consumers > CLIENTS_MAX {
        bail!("at most {CLIENTS_MAX} producers and {CLIENTS_MAX} consumers");
    }
    if config.size_bytes > MESSAGE_BYTES_MAX {
        bail!("--size {} exceeds {MESSAGE_BYTES_MAX}", config.size_bytes);
    }
    if config
        .confirm_window
        .is_some_and(|w| w > CONFIRM_WINDOW_MAX)
    {
        bail!("--confirm exceeds {CONFIRM_WINDOW_MAX}");
    }
    if config.multi_ack_every == 0 {
        bail!("--multi-ack-every must be at least 1");
    }
    if config.auto_ack && config.multi_ack_every > 1 {
        bail!("--auto-ack and --multi-ack-every exclude each other");
    }
    // The broker stops delivering once `qos` messages are unacked, so a consumer that waits for
    // more than that before acking would wait forever.
    if config.qos > 0 && !config.auto_ack && config.multi_ack_every > u32::from(config.qos) {
        bail!(
            "--multi-ack-every {} exceeds --qos {}: the consumer would stall",
            config.multi_ack_every,
            config.qos
        );
    }
    if config.soak.watch_every.is_zero() {
        bail!("--watch-every must be positive");
    }
    if config.soak.hold > 0 && config.time.is_none() {
        // The held messages are released when the run ends; only a timed run surely ends.
        bail!("--hold needs --time");
    }
    let producers_end = config.time.is_some() || config.pmessages.is_some();
    let consumers_end = config.time.is_some() || config.cmessages.is_some();
    if (config.producers > 0 && !producers_end) || (config.consumers > 0 && !consumers_end) {
        bail!("the run needs an end: --time, or --pmessages / --cmessages");
    }
    Ok(())
}

fn parse_sink(args: &[String]) -> Result<Command> {
    let mut listen = "127.0.0.1:5680".to_owned();
    let mut size_bytes = 16;
    let mut cursor = Cursor { args, at: 0 };
    while let Some(flag) = cursor.next_flag() {
        match flag {
            "--listen" => cursor.value(flag)?.clone_into(&mut listen),
            "--size" | "-s" => size_bytes = cursor.number(flag)?,
            other => bail!("unknown sink option {other:?} (try --help)"),
        }
    }
    if size_bytes > MESSAGE_BYTES_MAX {
        bail!("--size {size_bytes} exceeds {MESSAGE_BYTES_MAX}");
    }
    Ok(Command::Sink { listen, size_bytes })
}

fn default_recovery() -> RecoveryConfig {
    RecoveryConfig {
        uri: DEFAULT_URI.to_owned(),
        broker: Vec::new(),
        dir: None,
        fresh: false,
        broker_log: None,
        messages: 1_000_000,
        size_bytes: 100,
        queue: "wharf-perf-recovery".to_owned(),
        producers: 1,
        confirm_window: 1024,
        stop: StopMode::Term,
        rounds: 1,
        drain: false,
        drain_qos: 1000,
        drain_ack_every: 100,
        poll: Duration::from_millis(2),
        step_timeout: Duration::from_secs(300),
        json: false,
    }
}

/// The value of `--data-dir` in a broker command (`--data-dir DIR` or `--data-dir=DIR`).
pub fn data_dir_of(broker: &[String]) -> Option<PathBuf> {
    let mut args = broker.iter().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--data-dir" {
            return args.next().map(PathBuf::from);
        }
        if let Some(dir) = arg.strip_prefix("--data-dir=") {
            return Some(PathBuf::from(dir));
        }
    }
    None
}

fn parse_stop(text: &str) -> Result<StopMode> {
    match text {
        "term" => Ok(StopMode::Term),
        "kill" => Ok(StopMode::Kill),
        "none" => Ok(StopMode::None),
        other => bail!("--stop {other:?}: expected term, kill or none"),
    }
}

fn parse_recovery(args: &[String]) -> Result<RecoveryConfig> {
    let mut config = default_recovery();
    let mut program: Option<String> = None;
    let mut broker_args: Vec<String> = Vec::new();
    let mut command: Option<Vec<String>> = None;
    let mut cursor = Cursor { args, at: 0 };
    while let Some(flag) = cursor.next_flag() {
        // `--broker-arg=--port` keeps a dash-led argument unambiguous.
        if let Some(arg) = flag.strip_prefix("--broker-arg=") {
            broker_args.push(arg.to_owned());
            continue;
        }
        match flag {
            "--uri" => cursor.value(flag)?.clone_into(&mut config.uri),
            "--broker" => program = Some(cursor.value(flag)?.to_owned()),
            "--broker-arg" => broker_args.push(cursor.value(flag)?.to_owned()),
            "--broker-cmd" => {
                command = Some(
                    cursor
                        .value(flag)?
                        .split_whitespace()
                        .map(str::to_owned)
                        .collect(),
                );
            }
            "--broker-log" => config.broker_log = Some(cursor.value(flag)?.into()),
            "--dir" => config.dir = Some(cursor.value(flag)?.into()),
            "--fresh" => config.fresh = true,
            "--messages" => config.messages = cursor.number(flag)?,
            "--size" | "-s" => config.size_bytes = cursor.number(flag)?,
            "--queue" | "-u" => cursor.value(flag)?.clone_into(&mut config.queue),
            "--producers" | "-x" => config.producers = cursor.number(flag)?,
            "--confirm" | "-c" => config.confirm_window = cursor.number(flag)?,
            "--stop" => config.stop = parse_stop(cursor.value(flag)?)?,
            "--rounds" => config.rounds = cursor.number(flag)?,
            "--drain" => config.drain = true,
            "--drain-qos" => config.drain_qos = cursor.number(flag)?,
            "--drain-ack-every" => config.drain_ack_every = cursor.number(flag)?,
            "--poll-ms" => config.poll = Duration::from_millis(cursor.number(flag)?),
            "--step-timeout" => config.step_timeout = cursor.seconds(flag)?,
            "--json" => config.json = true,
            other => bail!("unknown recovery option {other:?} (try --help)"),
        }
    }
    config.broker = match (command, program) {
        (Some(_), Some(_)) => bail!("give --broker-cmd or --broker, not both"),
        (Some(_), None) if !broker_args.is_empty() => {
            bail!("--broker-arg goes with --broker, not --broker-cmd")
        }
        (Some(command), None) => command,
        (None, Some(program)) => std::iter::once(program).chain(broker_args).collect(),
        (None, None) => bail!("recovery needs the broker command: --broker PATH or --broker-cmd"),
    };
    if config.dir.is_none() {
        config.dir = data_dir_of(&config.broker);
    }
    validate_recovery(&config)?;
    Ok(config)
}

fn validate_recovery(config: &RecoveryConfig) -> Result<()> {
    if config.broker.first().is_none_or(String::is_empty) {
        bail!("the broker command is empty");
    }
    if config.fresh && config.dir.is_none() {
        bail!("--fresh needs the data directory (--dir, or --data-dir in the broker command)");
    }
    if config.messages == 0 || config.messages > u64::from(u32::MAX) {
        // queue.declare-ok reports the count as 32 bits.
        bail!("--messages must be 1 to {}", u32::MAX);
    }
    if config.producers == 0 || config.producers > CLIENTS_MAX {
        bail!("--producers must be 1 to {CLIENTS_MAX}");
    }
    if !config.messages.is_multiple_of(u64::from(config.producers)) {
        bail!(
            "--messages {} does not divide evenly among {} producers",
            config.messages,
            config.producers
        );
    }
    if config.size_bytes > MESSAGE_BYTES_MAX {
        bail!("--size {} exceeds {MESSAGE_BYTES_MAX}", config.size_bytes);
    }
    if config.confirm_window == 0 || config.confirm_window > CONFIRM_WINDOW_MAX {
        bail!("--confirm must be 1 to {CONFIRM_WINDOW_MAX} for recovery");
    }
    if config.rounds == 0 {
        bail!("--rounds must be at least 1");
    }
    if config.drain && config.stop == StopMode::None {
        bail!("--drain times the recovery; --stop none does not recover");
    }
    if config.drain_ack_every == 0 || config.drain_ack_every > u32::from(config.drain_qos) {
        bail!("--drain-ack-every must be 1 to --drain-qos, or the consumer would stall");
    }
    if config.poll.is_zero() || config.step_timeout.is_zero() {
        bail!("--poll-ms and --step-timeout must be positive");
    }
    Ok(())
}

fn parse_ttl_mix(args: &[String]) -> Result<TtlMixConfig> {
    let mut config = TtlMixConfig {
        uri: DEFAULT_URI.to_owned(),
        messages: 100_000,
        short_ms: 100,
        long_ms: 3_600_000,
        wait: Duration::from_secs(5),
        poll: Duration::from_millis(50),
        queue: "wharf-perf-ttl".to_owned(),
        dlx: "wharf-perf-ttl-dlx".to_owned(),
        dlq: "wharf-perf-ttl-dlq".to_owned(),
        size_bytes: 16,
        persistent: false,
        confirm_window: 256,
        seed: 1,
        keep: false,
        json: false,
    };
    let mut cursor = Cursor { args, at: 0 };
    while let Some(flag) = cursor.next_flag() {
        match flag {
            "--uri" => cursor.value(flag)?.clone_into(&mut config.uri),
            "--messages" => config.messages = cursor.number(flag)?,
            "--short-ms" => config.short_ms = cursor.number(flag)?,
            "--long-ms" => config.long_ms = cursor.number(flag)?,
            "--wait" => config.wait = cursor.seconds(flag)?,
            "--poll-ms" => config.poll = Duration::from_millis(cursor.number(flag)?),
            "--queue" => cursor.value(flag)?.clone_into(&mut config.queue),
            "--dlx" => cursor.value(flag)?.clone_into(&mut config.dlx),
            "--dlq" => cursor.value(flag)?.clone_into(&mut config.dlq),
            "--size" | "-s" => config.size_bytes = cursor.number(flag)?,
            "--persistent" | "-f" => config.persistent = true,
            "--confirm" | "-c" => config.confirm_window = cursor.number(flag)?,
            "--seed" => config.seed = cursor.number(flag)?,
            "--keep" => config.keep = true,
            "--json" => config.json = true,
            other => bail!("unknown ttl-mix option {other:?} (try --help)"),
        }
    }
    if config.confirm_window == 0 || config.confirm_window > CONFIRM_WINDOW_MAX {
        bail!("--confirm must be 1 to {CONFIRM_WINDOW_MAX} for ttl-mix");
    }
    if config.size_bytes > MESSAGE_BYTES_MAX {
        bail!("--size {} exceeds {MESSAGE_BYTES_MAX}", config.size_bytes);
    }
    // S-TTL-1: a TTL is an integer in 0 ..= 2^32-1.
    if config.short_ms > u64::from(u32::MAX) || config.long_ms > u64::from(u32::MAX) {
        bail!("TTLs must be at most {} ms", u32::MAX);
    }
    if config.poll.is_zero() {
        bail!("--poll-ms must be positive");
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_owned).collect()
    }

    fn run(text: &str) -> Result<RunConfig> {
        match parse(&argv(text))? {
            Command::Run(config) => Ok(config),
            other => panic!("expected a run, got {other:?}"),
        }
    }

    #[test]
    fn full_run_command_line() {
        let config = run(
            "--uri amqp://a:b@127.0.0.1:5673/v -x 2 -y 3 -s 1024 -f -c 256 -q 300 \
                          -A 50 --queue q1 --durable --queue-arg x-message-ttl=60000 \
                          --queue-arg x-dead-letter-exchange=dlx --queue-arg x-single=true \
                          -z 2.5 --purge-after --broker-pid 42 --json",
        )
        .unwrap();
        assert_eq!(config.uri, "amqp://a:b@127.0.0.1:5673/v");
        assert_eq!((config.producers, config.consumers), (2, 3));
        assert_eq!(config.size_bytes, 1024);
        assert!(config.persistent);
        assert_eq!(config.confirm_window, Some(256));
        assert_eq!((config.qos, config.multi_ack_every), (300, 50));
        assert_eq!(config.queue.name, "q1");
        assert!(config.queue.durable);
        assert_eq!(
            config.queue.args,
            vec![
                ("x-message-ttl".to_owned(), ArgValue::Int(60_000)),
                (
                    "x-dead-letter-exchange".to_owned(),
                    ArgValue::Str("dlx".to_owned())
                ),
                ("x-single".to_owned(), ArgValue::Bool(true)),
            ]
        );
        assert_eq!(config.time, Some(Duration::from_millis(2500)));
        assert!(config.purge_after && !config.purge_before && !config.delete_after);
        assert_eq!(config.broker_pid, Some(42));
        assert!(config.json);
    }

    #[test]
    fn defaults_and_the_run_keyword() {
        let config = run("run -C 10 -D 10").unwrap();
        assert_eq!(config.uri, DEFAULT_URI);
        assert_eq!((config.producers, config.consumers), (1, 1));
        assert_eq!(config.confirm_window, None);
        assert_eq!(config.multi_ack_every, 1);
        assert_eq!(config.queue.name, "wharf-perf");
        assert!(!config.queue.durable && !config.persistent && !config.json);
    }

    #[test]
    fn priorities_take_1_to_255() {
        assert_eq!(
            run("-C 1 -D 1 --priorities 10").unwrap().queue.priorities,
            10
        );
        assert_eq!(run("-C 1 -D 1").unwrap().queue.priorities, 0);
        assert!(run("-C 1 -D 1 --priorities 256").is_err());
        assert!(run("-C 1 -D 1 --priorities -1").is_err());
    }

    #[test]
    fn confirm_zero_means_no_confirms() {
        assert_eq!(run("-c 0 -z 1").unwrap().confirm_window, None);
    }

    #[test]
    fn refuses_bad_input() {
        for bad in [
            "-z 1 --bogus",
            "-z 1 -x",
            "-z 1 -x many",
            "-z 1 --queue-arg novalue",
            "-z 1 --queue-arg =1",
            "-z -1",
            "-x 0 -y 0 -z 1",
            "-x 1 -y 0",
            "-x 0 -y 1 -C 5",
            "-z 1 -A 0",
            "-z 1 -a -A 5",
            "-z 1 -c 70000",
            "-z 1 -s 999999999",
            "-z 1 -x 5000",
        ] {
            assert!(run(bad).is_err(), "accepted {bad:?}");
        }
    }

    #[test]
    fn multi_ack_beyond_prefetch_would_stall_and_is_refused() {
        assert!(run("-z 1 -q 100 -A 101").is_err());
        assert!(run("-z 1 -q 100 -A 100").is_ok());
        assert!(
            run("-z 1 -q 0 -A 1000").is_ok(),
            "unlimited prefetch cannot stall"
        );
    }

    #[test]
    fn ttl_mix_defaults_and_options() {
        let Command::TtlMix(config) = parse(&argv("ttl-mix")).unwrap() else {
            panic!("expected ttl-mix");
        };
        assert_eq!(config.messages, 100_000);
        assert_eq!((config.short_ms, config.long_ms), (100, 3_600_000));
        assert_eq!(config.wait, Duration::from_secs(5));
        let Command::TtlMix(config) = parse(&argv(
            "ttl-mix --messages 10 --short-ms 5 --long-ms 60000 --wait 0.5 --seed 7 --keep",
        ))
        .unwrap() else {
            panic!("expected ttl-mix");
        };
        assert_eq!(
            (config.messages, config.short_ms, config.long_ms),
            (10, 5, 60_000)
        );
        assert_eq!((config.wait, config.seed), (Duration::from_millis(500), 7));
        assert!(config.keep);
        assert!(
            parse(&argv("ttl-mix --long-ms 4294967296")).is_err(),
            "S-TTL-1 range"
        );
        assert!(parse(&argv("ttl-mix --confirm 0")).is_err());
    }

    #[test]
    fn sink_options() {
        assert_eq!(
            parse(&argv("sink --listen 127.0.0.1:1 -s 64")).unwrap(),
            Command::Sink {
                listen: "127.0.0.1:1".to_owned(),
                size_bytes: 64
            }
        );
        assert!(parse(&argv("sink --bogus")).is_err());
    }

    #[test]
    fn rate_is_parsed_and_defaults_to_unpaced() {
        assert_eq!(run("-z 1").unwrap().rate, 0);
        assert_eq!(run("-z 1 --rate 50000").unwrap().rate, 50_000);
        assert_eq!(run("-z 1 -r 7 -x 2").unwrap().rate, 7);
        assert_eq!(run("-z 1 --rate 0").unwrap().rate, 0);
        for bad in [
            "-z 1 --rate",
            "-z 1 --rate -5",
            "-z 1 --rate 1.5",
            "-z 1 --rate fast",
        ] {
            assert!(run(bad).is_err(), "accepted {bad:?}");
        }
    }

    fn recovery(text: &str) -> Result<RecoveryConfig> {
        match parse(&argv(&format!("recovery {text}")))? {
            Command::Recovery(config) => Ok(config),
            other => panic!("expected recovery, got {other:?}"),
        }
    }

    #[test]
    fn recovery_defaults_take_the_data_dir_from_the_broker_command() {
        let config = recovery(
            "--broker /b/wharf --broker-arg=--data-dir --broker-arg /tmp/d \
             --broker-arg=--port --broker-arg 5699",
        )
        .unwrap();
        assert_eq!(
            config.broker,
            argv("/b/wharf --data-dir /tmp/d --port 5699"),
            "arguments in order"
        );
        assert_eq!(config.dir, Some(PathBuf::from("/tmp/d")));
        assert_eq!((config.messages, config.size_bytes), (1_000_000, 100));
        assert_eq!(config.stop, StopMode::Term);
        assert_eq!(
            (config.rounds, config.producers, config.confirm_window),
            (1, 1, 1024)
        );
        assert_eq!(config.poll, Duration::from_millis(2));
        assert!(!config.drain && !config.fresh && !config.json);
    }

    #[test]
    fn recovery_broker_cmd_is_split_on_whitespace() {
        let Command::Recovery(config) = parse(&[
            "recovery".to_owned(),
            "--broker-cmd".to_owned(),
            "  wharf --data-dir=/x\t--mgmt-port 0 ".to_owned(),
            "--stop".to_owned(),
            "kill".to_owned(),
            "--rounds".to_owned(),
            "3".to_owned(),
            "--drain".to_owned(),
            "--fresh".to_owned(),
        ])
        .unwrap() else {
            panic!("expected recovery");
        };
        assert_eq!(config.broker, argv("wharf --data-dir=/x --mgmt-port 0"));
        assert_eq!(config.dir, Some(PathBuf::from("/x")));
        assert_eq!((config.stop, config.rounds), (StopMode::Kill, 3));
        assert!(config.drain && config.fresh);
    }

    #[test]
    fn an_explicit_dir_beats_the_broker_commands() {
        let config = recovery("--dir /m --broker-cmd wharf --stop none").unwrap();
        assert_eq!(config.dir, Some(PathBuf::from("/m")));
        assert_eq!(config.stop, StopMode::None);
        assert_eq!(data_dir_of(&argv("wharf --port 1")), None);
        assert_eq!(data_dir_of(&argv("wharf --data-dir")), None, "no value");
        assert_eq!(
            data_dir_of(&argv("--data-dir /not-an-arg")),
            None,
            "the program is not an argument"
        );
    }

    #[test]
    fn recovery_refuses_bad_input() {
        for bad in [
            "",
            "--broker-arg x",
            "--broker w --broker-cmd w",
            "--broker-cmd w --broker-arg x",
            "--broker-cmd w --fresh",
            "--broker-cmd w --stop maybe",
            "--broker-cmd w --messages 0",
            "--broker-cmd w --messages 4294967296",
            "--broker-cmd w --messages 10 -x 3",
            "--broker-cmd w -x 0",
            "--broker-cmd w --confirm 0",
            "--broker-cmd w --rounds 0",
            "--broker-cmd w --stop none --drain",
            "--broker-cmd w --drain-qos 10 --drain-ack-every 11",
            "--broker-cmd w --poll-ms 0",
            "--broker-cmd w --bogus",
        ] {
            assert!(recovery(bad).is_err(), "accepted {bad:?}");
        }
        assert!(recovery("--broker-cmd w --messages 10 -x 5").is_ok());
    }

    #[test]
    fn soak_options() {
        let config =
            run("-z 60 --hold 5 --watch-dir /d --watch-every 2.5 --segment-bytes 4096").unwrap();
        assert_eq!(config.soak.hold, 5);
        assert_eq!(config.soak.watch_dir, Some(PathBuf::from("/d")));
        assert_eq!(config.soak.watch_every, Duration::from_millis(2500));
        assert_eq!(config.soak.segment_bytes, 4096);
        let plain = run("-z 1").unwrap();
        assert_eq!(plain.soak.hold, 0);
        assert_eq!(plain.soak.segment_bytes, SEGMENT_BYTES_DEFAULT);
        assert_eq!(plain.soak.watch_dir, None);
        for bad in [
            "-z 1 --hold 70000",
            "-C 10 -D 10 --hold 5",
            "-z 1 --watch-every 0",
            "-z 1 --watch-dir",
        ] {
            assert!(run(bad).is_err(), "accepted {bad:?}");
        }
    }

    #[test]
    fn help() {
        assert_eq!(parse(&argv("--help")).unwrap(), Command::Help);
    }
}
