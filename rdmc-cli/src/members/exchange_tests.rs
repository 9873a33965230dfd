use super::*;

fn cluster_key(bytes: &[u8]) -> rdmc::ClusterKey {
    rdmc::ClusterKey::from_bytes(bytes.to_vec()).unwrap()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn spec(bootstrap: &str, rank: u32, size: u32, own: Own) -> Exchange {
    Exchange {
        bootstrap: bootstrap.to_owned(),
        rank,
        size,
        own,
    }
}

fn soon(seconds: u64) -> Instant {
    Instant::now() + Duration::from_secs(seconds)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rank_gets_the_same_list_in_rank_order() {
    let bootstrap = format!("127.0.0.1:{}", free_port());
    let key = ExchangeKey::derive(&cluster_key(b"a cluster key of sixteen bytes or more"));
    // Rank 0 last: the others retry until it listens.
    let mut tasks = Vec::new();
    for rank in [3u32, 1, 2, 0] {
        let own = if rank == 2 {
            Own::Given("127.0.0.1:9102".parse().unwrap())
        } else {
            Own::Port(9100 + rank as u16)
        };
        let (spec, key) = (spec(&bootstrap, rank, 4, own), key.clone());
        tasks.push(tokio::spawn(
            async move { run(&spec, &key, soon(20)).await },
        ));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let want: Vec<SocketAddr> = (0..4)
        .map(|r| format!("127.0.0.1:{}", 9100 + r).parse().unwrap())
        .collect();
    for task in tasks {
        assert_eq!(task.await.unwrap().unwrap(), want);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_cannot_register_or_answer() {
    let bootstrap = format!("127.0.0.1:{}", free_port());
    let key = ExchangeKey::derive(&cluster_key(b"a cluster key of sixteen bytes or more"));
    let stranger = ExchangeKey::derive(&cluster_key(b"some other key, also long enough"));
    let zero = {
        let (spec, key) = (spec(&bootstrap, 0, 2, Own::Port(9200)), key.clone());
        tokio::spawn(async move { run(&spec, &key, soon(20)).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The stranger claims rank 1 with its own address: refused, it hears
    // nothing back, and it gives up at its deadline.
    let evil = spec(
        &bootstrap,
        1,
        2,
        Own::Given("127.0.0.1:6666".parse().unwrap()),
    );
    let started = Instant::now();
    let err = run(&evil, &stranger, soon(2)).await.unwrap_err();
    let err = format!("{err:#}");
    assert!(started.elapsed() < Duration::from_secs(5), "bounded: {err}");
    assert!(
        err.contains("other cluster key") || err.contains("in time"),
        "{err}"
    );
    // The real rank 1 then completes the list: the stranger's address is not in it.
    let one = run(&spec(&bootstrap, 1, 2, Own::Port(9201)), &key, soon(20))
        .await
        .unwrap();
    assert_eq!(one[1], "127.0.0.1:9201".parse::<SocketAddr>().unwrap());
    assert_eq!(zero.await.unwrap().unwrap(), one);
}

#[tokio::test]
async fn a_bootstrap_that_never_answers_is_an_error_at_the_deadline() {
    let bootstrap = format!("127.0.0.1:{}", free_port());
    let key = ExchangeKey::derive(&cluster_key(b"a cluster key of sixteen bytes or more"));
    let started = Instant::now();
    let err = run(&spec(&bootstrap, 1, 2, Own::Port(1)), &key, soon(1))
        .await
        .unwrap_err();
    let err = format!("{err:#}");
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(
        err.contains(&bootstrap) && err.contains("MASTER_ADDR"),
        "{err}"
    );
}

#[tokio::test]
async fn rank_zero_names_the_ranks_that_never_registered() {
    let bootstrap = format!("127.0.0.1:{}", free_port());
    let key = ExchangeKey::derive(&cluster_key(b"a cluster key of sixteen bytes or more"));
    let err = run(&spec(&bootstrap, 0, 3, Own::Port(1)), &key, soon(1))
        .await
        .unwrap_err();
    let err = format!("{err:#}");
    assert!(err.contains("rank(s) 1, 2 of 3"), "{err}");
}

#[test]
fn nonces_survive_hex() {
    let nonce: [u8; NONCE] = std::array::from_fn(|i| (i * 17) as u8);
    assert_eq!(from_hex(&to_hex(&nonce)), Some(nonce));
    assert_eq!(from_hex("zz"), None);
}

/// A tag, pinned: ranks running other builds must compute the same bytes
/// (from Python's hmac).
#[test]
fn the_tags_are_pinned() {
    let key = ExchangeKey::derive(&cluster_key(b"sixteen bytes..."));
    let challenge: Vec<u8> = (0..16).collect();
    let parts: [&[u8]; 3] = [b"register", &challenge, b"1 2 00 127.0.0.1:9"];
    let tag = key.tag(&parts);
    assert_eq!(
        hex::encode(tag),
        "c1ab884896815156dcf0de7a6cfd2e82eb0fe264953216461edef0d9cf39ada2"
    );
    assert!(key.verify(&parts, &tag));
    assert!(!key.verify(&parts[..2], &tag));
}
