//! `wharfctl`: `rabbitmqctl`'s commands for wharf, over the management HTTP API (found by
//! `--url` or `WHARF_URL`, default <http://127.0.0.1:15672>). The logic is in `wharf_ctl`;
//! this only wires the process's arguments, environment and streams to it.
//!
//! `cluster_status` is answered here instead: it asks a node's cluster listener (`--cluster
//! HOST:PORT` or `WHARF_CLUSTER`, default `127.0.0.1:25672`) over the cluster link
//! (docs/CLUSTER-WIRE.md, "Status"), which needs `wharf_cluster` and tokio, kept out of the
//! thin `wharf_ctl`.

/// The cluster address `cluster_status` asks when none is given (RabbitMQ's inter-node port).
const DEFAULT_CLUSTER: &str = "127.0.0.1:25672";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("cluster_status") {
        std::process::exit(cluster_status(&args[1..]));
    }
    let env_url = std::env::var("WHARF_URL").ok().filter(|u| !u.is_empty());
    let (mut out, mut err, mut input) = (std::io::stdout(), std::io::stderr(), std::io::stdin());
    let mut io = wharf_ctl::Io {
        out: &mut out,
        err: &mut err,
        input: &mut input,
    };
    let code = wharf_ctl::run(&args, env_url, &mut io);
    std::process::exit(code);
}

/// `wharfctl cluster_status [--cluster HOST:PORT]`: prints the node's status text (members,
/// the leader of each group, who is in sync); exit 69 when the node does not answer, 64 on a
/// bad argument (sysexits, as `rabbitmqctl`).
fn cluster_status(args: &[String]) -> i32 {
    let mut addr = std::env::var("WHARF_CLUSTER")
        .ok()
        .filter(|a| !a.is_empty())
        .unwrap_or_else(|| DEFAULT_CLUSTER.to_owned());
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match (arg.as_str(), arg.strip_prefix("--cluster=")) {
            (_, Some(v)) => v.clone_into(&mut addr),
            ("--cluster", None) => {
                let Some(v) = rest.next() else {
                    eprintln!("Error: --cluster needs HOST:PORT");
                    return wharf_ctl::EXIT_USAGE;
                };
                addr.clone_from(v);
            }
            _ => {
                eprintln!("Error: cluster_status takes only --cluster HOST:PORT, not {arg:?}");
                return wharf_ctl::EXIT_USAGE;
            }
        }
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("Error: starting the runtime: {e}");
            return wharf_ctl::EXIT_SOFTWARE;
        }
    };
    match runtime.block_on(wharf_cluster::remote_status(&addr)) {
        Ok(text) => {
            print!("{text}");
            wharf_ctl::EXIT_OK
        }
        Err(e) => {
            eprintln!("Error: {e}");
            wharf_ctl::EXIT_UNAVAILABLE
        }
    }
}
