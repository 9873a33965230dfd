//! `rdmc tcp-copy`: the unicast baseline of `rdmc bench` — one plain TCP
//! connection from rank 0 to rank 1 moving the same payload prefixes, driven
//! by the same stdin commands and printing the same JSON events as
//! `rdmc member --bench` (see the `member_bench` module), so the driver measures both
//! the same way.

use std::io::{BufRead, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::json;

use crate::cluster::read_members;
use crate::member_bench::{cpu_seconds, mono_ns, payload};
use crate::size::parse_size;

/// Arguments of `rdmc tcp-copy`.
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

/// Run `rdmc tcp-copy`; an error is printed as an `error` event too.
pub(crate) fn run(args: TcpCopyArgs) -> ExitCode {
    match copy(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            println!(
                "{}",
                json!({"event": "error", "rank": args.rank, "error": error})
            );
            eprintln!("rdmc tcp-copy {}: {error}", args.rank);
            ExitCode::FAILURE
        }
    }
}

/// Be rank 0 or rank 1 until the sender is told to close.
fn copy(args: &TcpCopyArgs) -> Result<(), String> {
    let members = read_members(&args.members)?;
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

/// Seconds and process CPU seconds for plain TCP copies of every message
/// over loopback, once per receiver, one after another: what unicasting the
/// bytes costs. Tuned as a copy program would be: the sender, the receiver
/// and a checker are threads of their own, blocking sockets with large
/// writes, and the receiver reads into two buffers allocated and touched
/// beforehand, taking turns, so that it receives message k + 1 while the
/// checker compares message k (as the multicast's receiving application
/// checks one message while the next arrives into a warm pool buffer).
pub(crate) fn plain_copy_seconds(
    messages: &[bytes::Bytes],
    nodes: u32,
) -> Result<(f64, f64), String> {
    use std::sync::mpsc;

    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let largest = messages.iter().map(bytes::Bytes::len).max().unwrap_or(0);
    let mut spare = vec![vec![1u8; largest], vec![1u8; largest]];
    let cpu = cpu_seconds();
    let start = Instant::now();
    for _ in 1..nodes {
        spare = std::thread::scope(|scope| -> Result<Vec<Vec<u8>>, String> {
            // Received buffers go to the checker, checked ones come back.
            let (to_check, checking) = mpsc::sync_channel::<(usize, Vec<u8>)>(2);
            let (to_reuse, reusable) = mpsc::sync_channel::<Vec<u8>>(2);
            for buffer in spare.drain(..) {
                to_reuse.send(buffer).map_err(|e| e.to_string())?;
            }
            let checker = scope.spawn(move || -> Result<(), String> {
                for (index, buffer) in checking {
                    if buffer[..messages[index].len()] != messages[index][..] {
                        return Err("the copy differs".to_owned());
                    }
                    // The receiver may have finished; the buffer is then kept below.
                    let _ = to_reuse.send(buffer);
                }
                Ok(())
            });
            let listener = &listener;
            let receiver = scope.spawn(move || -> Result<Vec<Vec<u8>>, String> {
                let (mut socket, _) = listener.accept().map_err(|e| e.to_string())?;
                for (index, m) in messages.iter().enumerate() {
                    let mut buffer = reusable.recv().map_err(|e| e.to_string())?;
                    socket
                        .read_exact(&mut buffer[..m.len()])
                        .map_err(|e| e.to_string())?;
                    to_check.send((index, buffer)).map_err(|e| e.to_string())?;
                }
                drop(to_check);
                Ok(reusable.iter().collect())
            });
            let sent = (|| -> Result<(), String> {
                let mut socket = TcpStream::connect(addr).map_err(|e| e.to_string())?;
                socket.set_nodelay(true).map_err(|e| e.to_string())?;
                for m in messages {
                    socket.write_all(m).map_err(|e| e.to_string())?;
                }
                socket
                    .shutdown(std::net::Shutdown::Write)
                    .map_err(|e| e.to_string())
            })();
            let received = receiver
                .join()
                .map_err(|_| "the copy's receiver panicked".to_owned())?;
            let checked = checker
                .join()
                .map_err(|_| "the copy's checker panicked".to_owned())?;
            sent?;
            checked?;
            received
        })?;
    }
    Ok((start.elapsed().as_secs_f64(), cpu_seconds() - cpu))
}

/// Seconds and process CPU seconds for TLS 1.3 copies (rustls with its `ring` provider; the
/// client prefers AES-256-GCM) of every message over loopback, once per
/// receiver, one after another, into one reused buffer touched beforehand;
/// each message is checked on arrival. The handshake is inside the time (it
/// is a millisecond against the transfer); the certificate is made before.
pub(crate) fn tls_copy_seconds(
    messages: &[bytes::Bytes],
    nodes: u32,
) -> Result<(f64, f64), String> {
    use std::sync::Arc;

    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};

    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()])
        .map_err(|e| format!("making a certificate: {e}"))?;
    let cert: CertificateDer<'static> = certified.cert.der().clone();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
        certified.signing_key.serialize_der(),
    ));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls13 = [&rustls::version::TLS13];
    let mut server = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&tls13)
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], key)
        .map_err(|e| e.to_string())?;
    // No session tickets: the client would close with them unread, and
    // the reset could cut the copy short.
    server.send_tls13_tickets = 0;
    let server = Arc::new(server);
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).map_err(|e| e.to_string())?;
    let client = Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&tls13)
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth(),
    );
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let mut target = vec![1u8; messages.iter().map(bytes::Bytes::len).max().unwrap_or(0)];
    let cpu = cpu_seconds();
    let start = Instant::now();
    for _ in 1..nodes {
        std::thread::scope(|scope| {
            let receiver = scope.spawn(|| -> Result<(), String> {
                let (socket, _) = listener.accept().map_err(|e| e.to_string())?;
                let conn = rustls::ServerConnection::new(Arc::clone(&server))
                    .map_err(|e| e.to_string())?;
                let mut tls = rustls::StreamOwned::new(conn, socket);
                for m in messages {
                    let target = &mut target[..m.len()];
                    tls.read_exact(target).map_err(|e| e.to_string())?;
                    if target != &m[..] {
                        return Err("the TLS copy differs".to_owned());
                    }
                }
                Ok(())
            });
            let sent = (|| -> Result<(), String> {
                let socket = TcpStream::connect(addr).map_err(|e| e.to_string())?;
                socket.set_nodelay(true).map_err(|e| e.to_string())?;
                let name = ServerName::try_from("localhost").map_err(|e| e.to_string())?;
                let conn = rustls::ClientConnection::new(Arc::clone(&client), name)
                    .map_err(|e| e.to_string())?;
                let mut tls = rustls::StreamOwned::new(conn, socket);
                for m in messages {
                    tls.write_all(m).map_err(|e| e.to_string())?;
                }
                tls.conn.send_close_notify();
                tls.flush().map_err(|e| e.to_string())?;
                // Wait for the receiver to have everything (it closes).
                let _ = tls.sock.shutdown(std::net::Shutdown::Write);
                let mut sink = [0u8; 4096];
                while matches!(tls.read(&mut sink), Ok(n) if n > 0) {}
                Ok(())
            })();
            let received = receiver
                .join()
                .map_err(|_| "the TLS receiver panicked".to_owned())?;
            sent.and(received)
        })?;
    }
    Ok((start.elapsed().as_secs_f64(), cpu_seconds() - cpu))
}
