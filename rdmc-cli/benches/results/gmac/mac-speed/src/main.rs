//! Each candidate tags 20,000 times a 32 KiB buffer (after 1,000 warm-ups),
//! twice over; GB/s = 10^9 bytes per second.
use std::time::Instant;
fn bench(name: &str, mut f: impl FnMut(&mut [u8]) -> u8) {
    let mut buf = vec![7u8; 32768];
    let iters = 20000;
    let mut acc = 0u8;
    for _ in 0..1000 { acc ^= f(&mut buf); }
    let t = Instant::now();
    for _ in 0..iters { acc ^= f(&mut buf); }
    let s = t.elapsed().as_secs_f64();
    println!("{name:30} {:.2} GB/s ({acc})", (iters * 32768) as f64 / s / 1e9);
}
fn main() {
    let key = [3u8; 32];
    for _ in 0..2 {
    bench("blake3 keyed", |b| blake3::keyed_hash(&key, b).as_bytes()[0]);
    bench("blake3 plain", |b| blake3::hash(b).as_bytes()[0]);
    {
        use ring::aead::*;
        let k = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &key).unwrap());
        let mut scratch = vec![0u8; 32768];
        bench("ring gcm seal copy", |b| { scratch.copy_from_slice(b); k.seal_in_place_separate_tag(Nonce::assume_unique_for_key([0;12]), Aad::empty(), &mut scratch).unwrap().as_ref()[0] });
        bench("ring gmac aad", |b| { k.seal_in_place_separate_tag(Nonce::assume_unique_for_key([0;12]), Aad::from(&b[..]), &mut []).unwrap().as_ref()[0] });
    }
    {
        use aws_lc_rs::aead::*;
        let k = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &key).unwrap());
        let mut scratch = vec![0u8; 32768];
        bench("awslc gcm seal copy", |b| { scratch.copy_from_slice(b); k.seal_in_place_separate_tag(Nonce::assume_unique_for_key([0;12]), Aad::empty(), &mut scratch).unwrap().as_ref()[0] });
        bench("awslc gmac aad", |b| { k.seal_in_place_separate_tag(Nonce::assume_unique_for_key([0;12]), Aad::from(&b[..]), &mut []).unwrap().as_ref()[0] });
    }
    {
        use polyval::{Polyval, universal_hash::{KeyInit, UniversalHash}};
        bench("polyval", |b| { let mut p = Polyval::new(&[1u8;16].into()); p.update_padded(b); p.finalize()[0] });
    }
    }
}
