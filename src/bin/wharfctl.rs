//! `wharfctl`: `rabbitmqctl`'s commands for wharf, over the management HTTP API (found by
//! `--url` or `WHARF_URL`, default <http://127.0.0.1:15672>). The logic is in `wharf_ctl`;
//! this only wires the process's arguments, environment and streams to it.
//!
//! The cluster commands are answered here instead: they ask a node's cluster listener
//! (`--cluster HOST:PORT` or `WHARF_CLUSTER`, default `127.0.0.1:25672`) over the cluster link
//! (docs/CLUSTER-WIRE.md), which needs `wharf_cluster` and tokio, kept out of the thin
//! `wharf_ctl`: `cluster_status`, `add_member HOST:PORT` and `remove_member MEMBER_ID` (or
//! `forget_cluster_node MEMBER_ID`, rabbitmqctl's name), with `--group G` (default 0, the
//! metadata group) for the last two.

/// The cluster address the cluster commands ask when none is given (RabbitMQ's inter-node
/// port).
const DEFAULT_CLUSTER: &str = "127.0.0.1:25672";

/// The commands answered over the cluster link.
const CLUSTER_COMMANDS: [&str; 4] = [
    "cluster_status",
    "add_member",
    "remove_member",
    "forget_cluster_node",
];

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(command) = args
        .first()
        .filter(|c| CLUSTER_COMMANDS.contains(&c.as_str()))
    {
        std::process::exit(cluster_command(command, &args[1..]));
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
/// the leader of each group, who is in sync). `wharfctl add_member HOST:PORT [--group G]`
/// makes the seed at HOST:PORT a voter (it catches up as a learner first);
/// `wharfctl remove_member MEMBER_ID [--group G]` removes a member; any node forwards the
/// change to the group's leader, which refuses it while another is in flight (S-CLU-23).
/// Exit 69 when the node does not answer, 70 when the change is refused, 64 on a bad argument
/// (sysexits, as `rabbitmqctl`).
fn cluster_command(command: &str, args: &[String]) -> i32 {
    let mut addr = std::env::var("WHARF_CLUSTER")
        .ok()
        .filter(|a| !a.is_empty())
        .unwrap_or_else(|| DEFAULT_CLUSTER.to_owned());
    let mut group = None;
    let mut positional = Vec::new();
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v.to_owned())),
            _ => (arg.as_str(), None),
        };
        match name {
            "--cluster" | "--group" => {
                let Some(v) = inline.or_else(|| rest.next().cloned()) else {
                    eprintln!("Error: {name} needs a value");
                    return wharf_ctl::EXIT_USAGE;
                };
                if name == "--cluster" {
                    addr = v;
                } else {
                    group = Some(v);
                }
            }
            _ if !name.starts_with("--") => positional.push(arg.clone()),
            _ => {
                eprintln!("Error: {command} does not take {arg:?}");
                return wharf_ctl::EXIT_USAGE;
            }
        }
    }
    let group = match group.as_deref().map(str::parse::<u64>) {
        None => 0,
        Some(Ok(g)) if command != "cluster_status" => g,
        Some(_) => {
            eprintln!("Error: --group takes a group id, and only with a membership change");
            return wharf_ctl::EXIT_USAGE;
        }
    };
    let expected = usize::from(command != "cluster_status");
    if positional.len() != expected {
        eprintln!(
            "Error: {command} takes {}",
            match command {
                "cluster_status" => "only --cluster HOST:PORT",
                "add_member" => "the new member's cluster address, HOST:PORT",
                _ => "the member id to remove (as cluster_status shows it)",
            }
        );
        return wharf_ctl::EXIT_USAGE;
    }
    let member = match (command, positional.first()) {
        ("remove_member" | "forget_cluster_node", Some(id)) => {
            let Ok(id) = id.parse::<u64>() else {
                eprintln!("Error: {id:?} is not a member id");
                return wharf_ctl::EXIT_USAGE;
            };
            Some(id)
        }
        _ => None,
    };
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
    let answer = runtime.block_on(async {
        match (member, positional.first()) {
            (Some(id), _) => wharf_cluster::remote_remove_member(&addr, group, id).await,
            (None, Some(new)) => wharf_cluster::remote_add_member(&addr, group, new).await,
            (None, None) => wharf_cluster::remote_status(&addr).await,
        }
    });
    match answer {
        Ok(text) if text.ends_with('\n') => {
            print!("{text}");
            wharf_ctl::EXIT_OK
        }
        Ok(text) => {
            println!("{text}");
            wharf_ctl::EXIT_OK
        }
        Err(wharf_cluster::net::CallError::Failed {
            failure: wharf_cluster::net::wire::Failure::Refused(why),
            ..
        }) => {
            eprintln!("Error: {why}");
            wharf_ctl::EXIT_SOFTWARE
        }
        Err(e) => {
            eprintln!("Error: {e}");
            wharf_ctl::EXIT_UNAVAILABLE
        }
    }
}
