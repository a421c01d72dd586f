//! The `wharf-inspect` binary: parses the command line and runs the inspector (see `lib.rs`).

fn main() {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let code = wharf_inspect::run(std::env::args_os(), &mut out);
    let flushed = std::io::Write::flush(&mut out);
    drop(out);
    if let Err(e) = flushed
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        eprintln!("wharf-inspect: writing output: {e}");
        std::process::exit(wharf_inspect::EXIT_FATAL);
    }
    std::process::exit(code);
}
