//! `rdmc-bench tcp-copy`: the unicast baseline of `rdmc-bench` — one plain TCP
//! connection from rank 0 to rank 1 moving the same payload prefixes, driven
//! by the same stdin commands and printing the same JSON events as
//! `rdmc member --bench`, so the driver measures both
//! the same way.

use std::io::{BufRead, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::json;

use rdmc_cli::bench_protocol::payload;
use rdmc_cli::clocks::{cpu_seconds, mono_ns};
use rdmc_cli::cluster::read_members;
use rdmc_cli::size::parse_size;

/// Arguments of `rdmc-bench tcp-copy`.
#[derive(Debug, Args)]
pub(crate) struct TcpCopyArgs {
    /// Members file as for `rdmc member`: rank 0 sends, rank 1 (whose
    /// address is listened on) receives; further lines are ignored.
    #[arg(long, value_name = "FILE")]
    members: PathBuf,
    /// 0 (the sender) or 1 (the receiver).
    #[arg(long, value_parser = clap::value_parser!(u32).range(0..2))]
    rank: u32,
    /// The payload's size (the largest message).
    #[arg(long, value_parser = parse_size)]
    max_size: u64,
    /// Seconds the sender keeps trying to connect.
    #[arg(long, default_value_t = 30.0)]
    connect_timeout: f64,
}

/// Run `rdmc-bench tcp-copy`; an error is printed as an `error` event too.
pub(crate) fn run(args: TcpCopyArgs) -> ExitCode {
    match copy(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            println!(
                "{}",
                json!({"event": "error", "rank": args.rank, "error": error})
            );
            eprintln!("rdmc-bench tcp-copy {}: {error}", args.rank);
            ExitCode::FAILURE
        }
    }
}

/// Be rank 0 or rank 1 until the sender is told to close.
fn copy(args: &TcpCopyArgs) -> Result<(), String> {
    let members = read_members(&args.members).map_err(|e| format!("{e:#}"))?;
    let receiver = *members.get(1).ok_or("tcp-copy needs two members")?;
    let max = usize::try_from(args.max_size).map_err(|_| "--max-size is too large")?;
    let payload = payload(max);
    let start = Instant::now();
    let ready = || {
        println!(
            "{}",
            json!({"event": "ready", "rank": args.rank, "t": mono_ns(Instant::now()),
                   "cpu": cpu_seconds()})
        );
    };
    if args.rank == 1 {
        let listener =
            TcpListener::bind(receiver).map_err(|e| format!("listening on {receiver}: {e}"))?;
        ready();
        let (stream, _) = listener.accept().map_err(|e| format!("accepting: {e}"))?;
        receive(stream, &payload)?;
    } else {
        let deadline = Instant::now() + Duration::from_secs_f64(args.connect_timeout.max(0.0));
        let stream = loop {
            match TcpStream::connect(receiver) {
                Ok(s) => break s,
                Err(e) if Instant::now() >= deadline => {
                    return Err(format!("connecting to {receiver}: {e}"));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        };
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        ready();
        send(stream, &payload)?;
    }
    println!(
        "{}",
        json!({"event": "closed", "rank": args.rank,
               "seconds": start.elapsed().as_secs_f64(), "cpu": cpu_seconds()})
    );
    Ok(())
}

/// Rank 1: receive length-prefixed messages until the sender closes,
/// check each against the payload and report its delivery.
fn receive(mut stream: TcpStream, payload: &[u8]) -> Result<(), String> {
    let max = payload.len();
    // One buffer for every message, as a tuned copy program would do.
    let mut buffer = vec![0u8; max];
    let mut seq = 0u64;
    loop {
        let mut header = [0u8; 8];
        match stream.read_exact(&mut header) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(e) => return Err(format!("reading: {e}")),
        }
        let len = u64::from_le_bytes(header);
        if len > max as u64 {
            return Err(format!("message of {len} bytes is above --max-size"));
        }
        let data = &mut buffer[..len as usize];
        stream
            .read_exact(data)
            .map_err(|e| format!("reading: {e}"))?;
        let now = Instant::now();
        if data[..] != payload[..data.len()] {
            return Err(format!("message {seq} differs from the payload"));
        }
        println!(
            "{}",
            json!({"event": "delivered", "rank": 1, "seq": seq, "size": len,
                   "t": mono_ns(now), "cpu": cpu_seconds()})
        );
        seq += 1;
    }
    Ok(())
}

/// Rank 0: send payload prefixes as stdin commands them (`send SIZE COUNT`,
/// `close`) and report each burst.
fn send(mut stream: TcpStream, payload: &[u8]) -> Result<(), String> {
    let mut seq = 0u64;
    for line in std::io::stdin().lock().lines() {
        let line = line.map_err(|e| format!("reading stdin: {e}"))?;
        let words: Vec<&str> = line.split_whitespace().collect();
        let (size, count) = match words.as_slice() {
            [] => continue,
            ["close"] => break,
            ["send", size, count] => (
                size.parse::<usize>()
                    .ok()
                    .filter(|&s| s <= payload.len())
                    .ok_or_else(|| format!("bad size in {line:?}"))?,
                count
                    .parse::<u64>()
                    .ok()
                    .filter(|&c| c > 0)
                    .ok_or_else(|| format!("bad count in {line:?}"))?,
            ),
            _ => return Err(format!("unknown command {line:?}")),
        };
        let t0 = Instant::now();
        let cpu0 = cpu_seconds();
        for _ in 0..count {
            stream
                .write_all(&(size as u64).to_le_bytes())
                .and_then(|()| stream.write_all(&payload[..size]))
                .map_err(|e| format!("sending: {e}"))?;
        }
        println!(
            "{}",
            json!({"event": "sent", "rank": 0, "seq": seq, "count": count, "size": size,
                   "t": mono_ns(t0), "done_t": mono_ns(Instant::now()),
                   "cpu0": cpu0, "cpu": cpu_seconds()})
        );
        seq += count;
    }
    Ok(())
}
