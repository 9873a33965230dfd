//! `rdmc member --metrics-addr`: a member's Prometheus endpoint, scraped
//! while it lingers after a multicast, counts every byte it received (per
//! peer, summing to the files' sizes) and has one latency sample per
//! message.

mod child;
#[allow(dead_code)]
mod cluster_ports;
#[path = "../../rdmc/tests/common/scratch.rs"]
mod scratch;

#[allow(dead_code, unused_macros)]
mod member_suite;

use std::io::{Read, Write};
use std::process::Child;
use std::time::Duration;

use member_suite::{Scratch, Transport, wait, write_file};

const TCP: Transport = Transport::tcp("tcp_metrics");

/// The body of `GET /metrics` at `addr`.
fn scrape(addr: std::net::SocketAddr) -> String {
    let mut stream = std::net::TcpStream::connect(addr).expect("the endpoint listens");
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: rdmc\r\n\r\n")
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

/// The sum of the samples of `metric` (any labels) in Prometheus text.
fn sum(text: &str, metric: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(metric) && l[metric.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn a_members_metrics_count_every_byte_and_message_it_received() {
    let scratch = Scratch::new(
        &TCP,
        "metrics",
        3,
        "a key for the metrics test, long enough",
    );
    let sizes = [1_000_003usize, 17, 300_000];
    let files: Vec<_> = sizes
        .iter()
        .enumerate()
        .map(|(i, &len)| {
            let path = scratch.path(&format!("f{i}"));
            write_file(&path, len, i as u8);
            path
        })
        .collect();
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let addr_text = addr.to_string();
    let block = ["--block-size", "64KiB"];
    let mut children: Vec<Child> = (0..3)
        .map(|rank| {
            let mut extra = block.to_vec();
            if rank == 1 {
                extra.extend(["--metrics-addr", &addr_text, "--linger", "5"]);
            }
            scratch.spawn_member(rank, &extra, if rank == 0 { &files } else { &[] })
        })
        .collect();
    scratch.wait_for_output(1, sizes.len() - 1, Duration::from_secs(60));
    let text = scrape(addr);
    let total: usize = sizes.iter().sum();
    assert_eq!(
        sum(&text, "rdmc_bytes_received_total"),
        total as f64,
        "{text}"
    );
    assert_eq!(
        sum(&text, "rdmc_messages_delivered_total"),
        sizes.len() as f64,
        "{text}"
    );
    assert_eq!(
        sum(&text, "rdmc_message_seconds_count"),
        sizes.len() as f64,
        "{text}"
    );
    for (rank, child) in children.iter_mut().enumerate() {
        let (status, err) = wait(child, Duration::from_secs(60));
        assert!(status.success(), "rank {rank}: {err}");
    }
}
