//! `wharfctl`: `rabbitmqctl`'s commands for wharf, over the management HTTP API (found by
//! `--url` or `WHARF_URL`, default <http://127.0.0.1:15672>). The logic is in `wharf_ctl`;
//! this only wires the process's arguments, environment and streams to it.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
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
