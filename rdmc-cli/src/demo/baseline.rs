//! `rdmc demo --baseline`: what copying the same bytes costs without the
//! multicast — `memcpy`s for the in-process transport, plain TCP and TLS 1.3
//! copies over loopback for the others — timed beside the demo's runs.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Instant;

use anyhow::{anyhow, bail};
use bytes::Bytes;
use rdmc_cli::clocks::cpu_seconds;

/// Seconds for plain `memcpy`s of every message once per receiver — the
/// copying the mem transport's "DMA" does — spread over as many threads as
/// the machine has cores, like the demo's runtime. The destinations are
/// allocated and touched beforehand, so this is the memory-bandwidth bound.
/// Each copy is compared with its source afterwards, as the demo's
/// receivers compare what they get.
pub(super) fn memcpy_baseline(messages: &[Bytes], nodes: u32) -> f64 {
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    let copies: Vec<&Bytes> = (1..nodes).flat_map(|_| messages).collect();
    let mut targets: Vec<Vec<u8>> = copies.iter().map(|m| vec![1u8; m.len()]).collect();
    let per_thread = copies.len().div_ceil(threads).max(1);
    let start = Instant::now();
    std::thread::scope(|scope| {
        for (sources, targets) in copies
            .chunks(per_thread)
            .zip(targets.chunks_mut(per_thread))
        {
            scope.spawn(move || {
                for (source, target) in sources.iter().zip(targets) {
                    target.copy_from_slice(source);
                    // Checked as the multicast's receivers check theirs.
                    assert!(
                        std::hint::black_box(&target[..]) == &source[..],
                        "a memcpy differs from its source"
                    );
                }
            });
        }
    });
    start.elapsed().as_secs_f64()
}

/// Seconds and process CPU seconds for plain TCP copies of every message
/// over loopback, once per receiver, one after another: what unicasting the
/// bytes costs. Tuned as a copy program would be: the sender, the receiver
/// and a checker are threads of their own, blocking sockets with large
/// writes, and the receiver reads into two buffers allocated and touched
/// beforehand, taking turns, so that it receives message k + 1 while the
/// checker compares message k (as the multicast's receiving application
/// checks one message while the next arrives into a warm pool buffer).
pub(super) fn plain_copy_seconds(messages: &[Bytes], nodes: u32) -> anyhow::Result<(f64, f64)> {
    use std::sync::mpsc;

    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| anyhow!("{e}"))?;
    let addr = listener.local_addr().map_err(|e| anyhow!("{e}"))?;
    let largest = messages.iter().map(Bytes::len).max().unwrap_or(0);
    let mut spare = vec![vec![1u8; largest], vec![1u8; largest]];
    let cpu = cpu_seconds();
    let start = Instant::now();
    for _ in 1..nodes {
        spare = std::thread::scope(|scope| -> anyhow::Result<Vec<Vec<u8>>> {
            // Received buffers go to the checker, checked ones come back.
            let (to_check, checking) = mpsc::sync_channel::<(usize, Vec<u8>)>(2);
            let (to_reuse, reusable) = mpsc::sync_channel::<Vec<u8>>(2);
            for buffer in spare.drain(..) {
                to_reuse.send(buffer).map_err(|e| anyhow!("{e}"))?;
            }
            let checker = scope.spawn(move || -> anyhow::Result<()> {
                for (index, buffer) in checking {
                    if buffer[..messages[index].len()] != messages[index][..] {
                        bail!("the copy differs");
                    }
                    // The receiver may have finished; the buffer is then kept below.
                    let _ = to_reuse.send(buffer);
                }
                Ok(())
            });
            let listener = &listener;
            let receiver = scope.spawn(move || -> anyhow::Result<Vec<Vec<u8>>> {
                let (mut socket, _) = listener.accept().map_err(|e| anyhow!("{e}"))?;
                for (index, m) in messages.iter().enumerate() {
                    let mut buffer = reusable.recv().map_err(|e| anyhow!("{e}"))?;
                    socket
                        .read_exact(&mut buffer[..m.len()])
                        .map_err(|e| anyhow!("{e}"))?;
                    to_check.send((index, buffer)).map_err(|e| anyhow!("{e}"))?;
                }
                drop(to_check);
                Ok(reusable.iter().collect())
            });
            let sent = (|| -> anyhow::Result<()> {
                let mut socket = TcpStream::connect(addr).map_err(|e| anyhow!("{e}"))?;
                socket.set_nodelay(true).map_err(|e| anyhow!("{e}"))?;
                for m in messages {
                    socket.write_all(m).map_err(|e| anyhow!("{e}"))?;
                }
                socket
                    .shutdown(std::net::Shutdown::Write)
                    .map_err(|e| anyhow!("{e}"))
            })();
            let received = receiver
                .join()
                .map_err(|_| anyhow!("the copy's receiver panicked"))?;
            let checked = checker
                .join()
                .map_err(|_| anyhow!("the copy's checker panicked"))?;
            sent?;
            checked?;
            received
        })?;
    }
    Ok((start.elapsed().as_secs_f64(), cpu_seconds() - cpu))
}

/// Seconds and process CPU seconds for TLS 1.3 copies (rustls with its default `aws-lc-rs` provider; the
/// client prefers AES-256-GCM) of every message over loopback, once per
/// receiver, one after another, into one reused buffer touched beforehand;
/// each message is checked on arrival. The handshake is inside the time (it
/// is a millisecond against the transfer); the certificate is made before.
pub(super) fn tls_copy_seconds(messages: &[Bytes], nodes: u32) -> anyhow::Result<(f64, f64)> {
    use std::sync::Arc;

    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};

    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()])
        .map_err(|e| anyhow!("making a certificate: {e}"))?;
    let cert: CertificateDer<'static> = certified.cert.der().clone();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
        certified.signing_key.serialize_der(),
    ));
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let tls13 = [&rustls::version::TLS13];
    let mut server = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&tls13)
        .map_err(|e| anyhow!("{e}"))?
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], key)
        .map_err(|e| anyhow!("{e}"))?;
    // No session tickets: the client would close with them unread, and
    // the reset could cut the copy short.
    server.send_tls13_tickets = 0;
    let server = Arc::new(server);
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).map_err(|e| anyhow!("{e}"))?;
    let client = Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&tls13)
            .map_err(|e| anyhow!("{e}"))?
            .with_root_certificates(roots)
            .with_no_client_auth(),
    );
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| anyhow!("{e}"))?;
    let addr = listener.local_addr().map_err(|e| anyhow!("{e}"))?;
    let mut target = vec![1u8; messages.iter().map(Bytes::len).max().unwrap_or(0)];
    let cpu = cpu_seconds();
    let start = Instant::now();
    for _ in 1..nodes {
        std::thread::scope(|scope| {
            let receiver = scope.spawn(|| -> anyhow::Result<()> {
                let (socket, _) = listener.accept().map_err(|e| anyhow!("{e}"))?;
                let conn = rustls::ServerConnection::new(Arc::clone(&server))
                    .map_err(|e| anyhow!("{e}"))?;
                let mut tls = rustls::StreamOwned::new(conn, socket);
                for m in messages {
                    let target = &mut target[..m.len()];
                    tls.read_exact(target).map_err(|e| anyhow!("{e}"))?;
                    if target != &m[..] {
                        bail!("the TLS copy differs");
                    }
                }
                Ok(())
            });
            let sent = (|| -> anyhow::Result<()> {
                let socket = TcpStream::connect(addr).map_err(|e| anyhow!("{e}"))?;
                socket.set_nodelay(true).map_err(|e| anyhow!("{e}"))?;
                let name = ServerName::try_from("localhost").map_err(|e| anyhow!("{e}"))?;
                let conn = rustls::ClientConnection::new(Arc::clone(&client), name)
                    .map_err(|e| anyhow!("{e}"))?;
                let mut tls = rustls::StreamOwned::new(conn, socket);
                for m in messages {
                    tls.write_all(m).map_err(|e| anyhow!("{e}"))?;
                }
                tls.conn.send_close_notify();
                tls.flush().map_err(|e| anyhow!("{e}"))?;
                // Wait for the receiver to have everything (it closes).
                let _ = tls.sock.shutdown(std::net::Shutdown::Write);
                let mut sink = [0u8; 4096];
                while matches!(tls.read(&mut sink), Ok(n) if n > 0) {}
                Ok(())
            })();
            let received = receiver
                .join()
                .map_err(|_| anyhow!("the TLS receiver panicked"))?;
            sent.and(received)
        })?;
    }
    Ok((start.elapsed().as_secs_f64(), cpu_seconds() - cpu))
}
